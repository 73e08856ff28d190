//! Measures the storage candidates for relink's spool on this machine, each doing what the
//! spool does: append a record per frame, make it durable by a policy, remove frames from the
//! front once confirmed, read everything back at a start.
//!
//! Run with `cargo run --release --manifest-path benches/spool-candidates/Cargo.toml`
//! (`-- --quick` for small counts).
//!
//! - `own`: relink's own segment log as `src/io/spool.rs` writes it (a 24-byte header with a
//!   CRC-32C, the frame; `pwrite` per frame; `fdatasync` by the policy);
//! - `queue-file`: the `queue-file` crate (a ring buffer in one file, Tape's format), `add`
//!   per frame, its `sync_writes` on for every-frame, off otherwise;
//! - `redb`: the `redb` crate (a copy-on-write B-tree), one key (the sequence number) per
//!   frame, one write transaction per frame (every-frame: `Durability::Immediate`) or per group
//!   (`Durability::Immediate` every 5 ms, `Durability::None` between).
//!
//! One line per candidate and size: `candidate=<name> size=<bytes> every_fps=<frames/s with
//! every frame synced> group_fps=<with a sync every 5 ms> os_fps=<never synced>
//! recover_ms=<open and read back a million 64 B frames (size 64 only)>
//! reclaimed=<bytes left on disk after every frame was removed>`

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use redb::ReadableTable;

const GROUP: Duration = Duration::from_millis(5);

#[derive(Clone, Copy, PartialEq)]
enum Policy {
    Every,
    Group,
    Os,
}

fn scratch(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("spool-candidates-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&p);
    fs::create_dir_all(&p).unwrap();
    p
}

fn dir_bytes(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum()
}

trait Store {
    fn append(&mut self, seq: u64, frame: &[u8]);
    fn sync(&mut self);
    fn remove_all(&mut self, n: u64);
}

// ----- own -----
struct Own {
    file: File,
    pos: u64,
    buf: Vec<u8>,
    policy: Policy,
}

impl Own {
    fn open(dir: &Path, policy: Policy) -> Own {
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .read(true)
            .open(dir.join("seg"))
            .unwrap();
        Own {
            file,
            pos: 0,
            buf: Vec::new(),
            policy,
        }
    }
    fn recover(dir: &Path) -> usize {
        let data = fs::read(dir.join("seg")).unwrap();
        let mut at = 0;
        let mut n = 0;
        while data.len() - at >= 24 {
            let len = u32::from_le_bytes(data[at..at + 4].try_into().unwrap()) as usize;
            let crc = u32::from_le_bytes(data[at + 4..at + 8].try_into().unwrap());
            if crc32c::crc32c(&data[at + 8..at + 24 + len]) != crc {
                break;
            }
            at += 24 + len;
            n += 1;
        }
        n
    }
}

impl Store for Own {
    fn append(&mut self, seq: u64, frame: &[u8]) {
        let start = self.buf.len();
        self.buf
            .extend_from_slice(&(frame.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(&[0; 4]);
        self.buf.extend_from_slice(&seq.to_le_bytes());
        self.buf.extend_from_slice(&0u64.to_le_bytes());
        self.buf.extend_from_slice(frame);
        let crc = crc32c::crc32c(&self.buf[start + 8..]);
        self.buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
        if self.policy != Policy::Group || self.buf.len() >= 256 * 1024 {
            self.file.write_all_at(&self.buf, self.pos).unwrap();
            self.pos += self.buf.len() as u64;
            self.buf.clear();
        }
        if self.policy == Policy::Every {
            self.file.sync_data().unwrap();
        }
    }
    fn sync(&mut self) {
        self.file.write_all_at(&self.buf, self.pos).unwrap();
        self.pos += self.buf.len() as u64;
        self.buf.clear();
        self.file.sync_data().unwrap();
    }
    fn remove_all(&mut self, _n: u64) {
        // The acks log says they left; a segment whose frames all left is deleted.
        self.file.set_len(0).unwrap();
    }
}

// ----- queue-file -----
struct Qf(queue_file::QueueFile);

impl Qf {
    fn open(dir: &Path, policy: Policy) -> Qf {
        let mut q = queue_file::QueueFile::open(dir.join("queue")).unwrap();
        q.set_sync_writes(policy == Policy::Every);
        Qf(q)
    }
}

impl Store for Qf {
    fn append(&mut self, _seq: u64, frame: &[u8]) {
        self.0.add(frame).unwrap();
    }
    fn sync(&mut self) {
        // queue-file has no sync of its own but per write: count it as one write synced.
        self.0.set_sync_writes(true);
        self.0.add(b"").unwrap();
        self.0.set_sync_writes(false);
    }
    fn remove_all(&mut self, n: u64) {
        self.0.remove_n(n as usize).unwrap();
    }
}

// ----- redb -----
const TABLE: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("frames");

struct Rb {
    db: redb::Database,
    policy: Policy,
    pending: Vec<(u64, Vec<u8>)>,
}

impl Rb {
    fn open(dir: &Path, policy: Policy) -> Rb {
        let db = redb::Database::create(dir.join("db")).unwrap();
        Rb {
            db,
            policy,
            pending: Vec::new(),
        }
    }
    fn commit(&mut self, durability: redb::Durability) {
        let mut tx = self.db.begin_write().unwrap();
        tx.set_durability(durability);
        {
            let mut t = tx.open_table(TABLE).unwrap();
            for (k, v) in self.pending.drain(..) {
                t.insert(k, v.as_slice()).unwrap();
            }
        }
        tx.commit().unwrap();
    }
}

impl Store for Rb {
    fn append(&mut self, seq: u64, frame: &[u8]) {
        self.pending.push((seq, frame.to_vec()));
        match self.policy {
            Policy::Every => self.commit(redb::Durability::Immediate),
            Policy::Group | Policy::Os if self.pending.len() >= 1024 => {
                self.commit(redb::Durability::None)
            }
            _ => {}
        }
    }
    fn sync(&mut self) {
        self.commit(redb::Durability::Immediate);
    }
    fn remove_all(&mut self, n: u64) {
        self.commit(redb::Durability::None);
        let tx = self.db.begin_write().unwrap();
        {
            let mut t = tx.open_table(TABLE).unwrap();
            t.retain(|k, _| k >= n).unwrap();
        }
        tx.commit().unwrap();
        let _ = self.db.compact();
    }
}

fn rate(mut store: impl Store, policy: Policy, size: usize, n: u64) -> f64 {
    let frame = vec![7u8; size];
    let start = Instant::now();
    let mut last_sync = start;
    for seq in 0..n {
        store.append(seq, &frame);
        if policy == Policy::Group && last_sync.elapsed() >= GROUP {
            store.sync();
            last_sync = Instant::now();
        }
    }
    if policy == Policy::Group {
        store.sync();
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn open(name: &str, dir: &Path, policy: Policy) -> Box<dyn Store> {
    match name {
        "own" => Box::new(Own::open(dir, policy)),
        "queue-file" => Box::new(Qf::open(dir, policy)),
        _ => Box::new(Rb::open(dir, policy)),
    }
}

impl Store for Box<dyn Store> {
    fn append(&mut self, seq: u64, frame: &[u8]) {
        (**self).append(seq, frame)
    }
    fn sync(&mut self) {
        (**self).sync()
    }
    fn remove_all(&mut self, n: u64) {
        (**self).remove_all(n)
    }
}

fn recover(name: &str, n: u64) -> (f64, u64) {
    let dir = scratch(&format!("{name}-recover"));
    {
        let mut s = open(name, &dir, Policy::Os);
        let frame = [7u8; 64];
        for seq in 0..n {
            s.append(seq, &frame);
        }
        s.sync();
    }
    let start = Instant::now();
    let got = match name {
        "own" => Own::recover(&dir),
        "queue-file" => {
            let mut q = queue_file::QueueFile::open(dir.join("queue")).unwrap();
            q.iter().count()
        }
        _ => {
            let db = redb::Database::create(dir.join("db")).unwrap();
            let tx = db.begin_read().unwrap();
            let t = tx.open_table(TABLE).unwrap();
            t.iter().unwrap().count()
        }
    };
    let ms = start.elapsed().as_secs_f64() * 1e3;
    assert!(got as u64 >= n, "{name} recovered {got} of {n}");
    let reclaimed = {
        let mut s = open(name, &dir, Policy::Os);
        s.remove_all(n + 1);
        drop(s);
        dir_bytes(&dir)
    };
    let _ = fs::remove_dir_all(&dir);
    (ms, reclaimed)
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (n, every_n, rec_n) = if quick {
        (20_000, 200, 50_000)
    } else {
        (200_000, 1_000, 1_000_000)
    };
    for name in ["own", "queue-file", "redb"] {
        for size in [64usize, 1024] {
            let run = |p: Policy, n: u64| {
                let dir = scratch(name);
                let r = rate(open(name, &dir, p), p, size, n);
                let _ = fs::remove_dir_all(&dir);
                r
            };
            let every = run(Policy::Every, every_n);
            let group = run(Policy::Group, n);
            let os = run(Policy::Os, n);
            let (rec, reclaimed) = if size == 64 {
                recover(name, rec_n)
            } else {
                (0.0, 0)
            };
            println!(
                "candidate={name} size={size} every_fps={every:.0} group_fps={group:.0} \
                 os_fps={os:.0} recover_ms={rec:.0} reclaimed={reclaimed}"
            );
        }
    }
}
