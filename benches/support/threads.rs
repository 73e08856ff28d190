//! The process's threads as the kernel counts them (`/proc/self/task`): each one's CPU time
//! (`schedstat`, nanoseconds on a CPU) and its voluntary context switches (`status`: each is
//! a sleep, so each is a wake-up), summed by the thread's name; the main thread is `app`,
//! threads named [`PEER`] (a bench's in-process peer) are left out.

use std::collections::BTreeMap;
use std::fmt::Write;

/// The name an in-process peer's threads give themselves, to be left out.
pub const PEER: &str = "paced-peer";

/// Names the calling thread (`PR_SET_NAME`, at most 15 bytes).
pub fn name_this(name: &str) {
    let mut bytes = name.as_bytes()[..name.len().min(15)].to_vec();
    bytes.push(0);
    // SAFETY: prctl(PR_SET_NAME) reads a NUL-terminated string of at most 16 bytes.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, bytes.as_ptr());
    }
}

/// CPU nanoseconds and wake-ups by thread name.
#[derive(Default)]
pub struct Threads(BTreeMap<String, (u64, u64)>);

impl Threads {
    pub fn read() -> Threads {
        let mut by = BTreeMap::new();
        let pid = std::process::id().to_string();
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return Threads(by);
        };
        for task in tasks.flatten() {
            let dir = task.path();
            let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
            let comm = read("comm").trim().to_string();
            if comm == PEER {
                continue;
            }
            let name = if task.file_name().to_string_lossy() == pid {
                "app".to_string()
            } else {
                comm.replace(['/', ' '], "-")
            };
            let ns: u64 = read("schedstat")
                .split_whitespace()
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let wakes: u64 = read("status")
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            let e = by.entry(name).or_insert((0, 0));
            e.0 += ns;
            e.1 += wakes;
        }
        Threads(by)
    }

    /// What each thread used since `before` (a thread new since then from zero).
    pub fn since(&self, before: &Threads) -> Threads {
        Threads(
            self.0
                .iter()
                .map(|(k, &(ns, w))| {
                    let (ns0, w0) = before.0.get(k).copied().unwrap_or((0, 0));
                    (k.clone(), (ns.saturating_sub(ns0), w.saturating_sub(w0)))
                })
                .collect(),
        )
    }

    /// ` <name>_us=<CPU µs per frame> <name>_wakes=<wake-ups per frame>` for each thread
    /// that ran, and the total (a frame, or whatever unit `frames` counts).
    pub fn per_frame(&self, frames: f64) -> String {
        let mut out = String::new();
        let (mut ns_all, mut w_all) = (0, 0);
        for (name, &(ns, w)) in &self.0 {
            if ns == 0 && w == 0 {
                continue;
            }
            ns_all += ns;
            w_all += w;
            let _ = write!(
                out,
                " {name}_us={:.2} {name}_wakes={:.2}",
                ns as f64 / 1e3 / frames,
                w as f64 / frames
            );
        }
        let _ = write!(
            out,
            " all_us={:.2} all_wakes={:.2}",
            ns_all as f64 / 1e3 / frames,
            w_all as f64 / frames
        );
        out
    }
}
