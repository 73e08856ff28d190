//! Export of a pool's links through the `metrics` crate's facade (cargo feature `metrics`):
//! a thread of its own asks the pool's IO threads for their links' snapshots at each
//! interval and turns the changes into counters, gauges and histograms. The IO threads
//! only answer (one pass each); no frame pays for the export.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{RecvTimeoutError, Sender};
use metrics::{counter, gauge, histogram, Label};

use crate::event::{AbandonReason, State};
use crate::io::IoPool;
use crate::metrics::Metrics;

/// What [`IoPool::export_metrics`] exports, and how often. A by-value builder.
///
/// Every series has the label `pool` (the name given to [`MetricsExport::new`]); with
/// [`per_link`](MetricsExport::per_link) the counters, the outbox gauges and the histograms
/// also have `link` (the link's [`name`](crate::Builder::name)).
///
/// | name | kind | labels |
/// |---|---|---|
/// | `relink_frames_sent_total`, `relink_frames_received_total` | counter | pool (, link) |
/// | `relink_bytes_sent_total`, `relink_bytes_received_total` | counter | pool (, link) |
/// | `relink_connects_total`, `relink_reconnects_total` | counter | pool (, link) |
/// | `relink_abandoned_total` | counter | pool, reason (, link) |
/// | `relink_heartbeats_missed_total`, `relink_tls_rejected_total` | counter | pool (, link) |
/// | `relink_frames_cut_total`, `relink_frames_unread_total`, `relink_bytes_discarded_total` (inbound frames and bytes that never reached the application: [`Metrics::frames_cut`], [`Metrics::frames_unread`], [`Metrics::bytes_discarded`]) | counter | pool (, link) |
/// | `relink_frames_refused_total` (answers that refused a frame, not run: [`Metrics::frames_refused`]) | counter | pool (, link) |
/// | `relink_links` | gauge | pool, state |
/// | `relink_outbox_frames`, `relink_outbox_bytes` | gauge | pool (, link) |
/// | `relink_rtt_seconds` | histogram: each link's last heartbeat round trip, when a new one came | pool (, link) |
/// | `relink_outage_seconds` | histogram: each outage, when the link is back | pool (, link) |
///
/// Per-link labels make a set of series per link: measured at 4 500 links
/// (`cargo bench --bench links --features metrics -- --quick --links 4500`), 108 031 lines of
/// Prometheus text (7.3 MiB per scrape, each line a series the server stores) and 31 ms per
/// export pass, against 31 lines (2 KiB) and 2 ms with the default labels per pool, whatever
/// the number of links. Those figures count the series of this table without the three
/// inbound counters, which add one line each per pool (and per link, with per-link labels).
#[derive(Clone, Debug)]
pub struct MetricsExport {
    pool: String,
    per_link: bool,
    interval: Duration,
}

impl MetricsExport {
    /// Exports under the label `pool="<pool>"`, every second, without per-link labels.
    pub fn new(pool: impl Into<String>) -> MetricsExport {
        MetricsExport {
            pool: pool.into(),
            per_link: false,
            interval: Duration::from_secs(1),
        }
    }

    /// Whether counters, outbox gauges and histograms are labelled per link as well (one
    /// series per link: see the cost above). Defaults to `false`.
    pub fn per_link(mut self, on: bool) -> MetricsExport {
        self.per_link = on;
        self
    }

    /// How often the links are looked at. Defaults to 1 s.
    pub fn interval(mut self, every: Duration) -> MetricsExport {
        self.interval = every.max(Duration::from_millis(1));
        self
    }
}

/// The export started by [`IoPool::export_metrics`]: its thread runs until this is dropped
/// (and keeps the pool's threads until then).
#[derive(Debug)]
pub struct MetricsExporter {
    state: Arc<Mutex<Exporter>>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsExporter {
    /// Exports now, without waiting for the next interval (before a scrape, or at the end of
    /// a run).
    pub fn flush(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).tick();
    }
}

impl Drop for MetricsExporter {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl IoPool {
    /// Starts exporting the pool's links through the `metrics` crate (see
    /// [`MetricsExport`] for the series). The application installs a recorder first
    /// (`metrics-exporter-prometheus`, or any other backend); without one the values go
    /// nowhere.
    ///
    /// # Examples
    /// ```
    /// use relink::IoPool;
    /// use relink::pool::MetricsExport;
    ///
    /// let pool = IoPool::new(1)?;
    /// let exporter = pool.export_metrics(MetricsExport::new("gateways"));
    /// exporter.flush();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn export_metrics(&self, export: MetricsExport) -> MetricsExporter {
        let interval = export.interval;
        let state = Arc::new(Mutex::new(Exporter {
            pool: self.clone(),
            labels: vec![Label::new("pool", export.pool.clone())],
            export,
            last: HashMap::new(),
        }));
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let shared = state.clone();
        let thread = std::thread::Builder::new()
            .name("relink-metrics".into())
            .spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                    shared.lock().unwrap_or_else(|e| e.into_inner()).tick();
                }
            })
            .ok();
        MetricsExporter {
            state,
            stop: Some(stop),
            thread,
        }
    }
}

/// The export's memory: each link's snapshot at the last pass.
#[derive(Debug)]
struct Exporter {
    pool: IoPool,
    export: MetricsExport,
    labels: Vec<Label>,
    last: HashMap<u64, Metrics>,
}

/// What grew between two snapshots of a link (or of all of them).
#[derive(Default)]
struct Growth {
    frames_sent: u64,
    frames_received: u64,
    bytes_sent: u64,
    bytes_received: u64,
    connects: u64,
    reconnects: u64,
    heartbeats_missed: u64,
    tls_rejected: u64,
    frames_cut: u64,
    frames_unread: u64,
    bytes_discarded: u64,
    frames_refused: u64,
    abandoned: [u64; REASONS],
}

/// Every abandon reason is a label value of `relink_abandoned_total`.
const REASONS: usize = AbandonReason::ALL.len();

fn abandoned(m: &Metrics) -> [u64; REASONS] {
    AbandonReason::ALL.map(|r| m.abandoned.get(r))
}

impl Growth {
    fn between(before: Option<&Metrics>, now: &Metrics) -> Growth {
        let was = |f: fn(&Metrics) -> u64| before.map_or(0, f);
        let grew = |f: fn(&Metrics) -> u64| f(now).saturating_sub(was(f));
        let (a0, a1) = (before.map(abandoned).unwrap_or_default(), abandoned(now));
        Growth {
            frames_sent: grew(|m| m.frames_sent),
            frames_received: grew(|m| m.frames_received),
            bytes_sent: grew(|m| m.bytes_sent),
            bytes_received: grew(|m| m.bytes_received),
            connects: grew(|m| m.connects),
            reconnects: grew(|m| m.reconnects),
            heartbeats_missed: grew(|m| m.heartbeats_missed),
            tls_rejected: grew(|m| m.tls_rejected),
            frames_cut: grew(|m| m.frames_cut),
            frames_unread: grew(|m| m.frames_unread),
            bytes_discarded: grew(|m| m.bytes_discarded),
            frames_refused: grew(|m| m.frames_refused),
            abandoned: std::array::from_fn(|i| a1[i].saturating_sub(a0[i])),
        }
    }

    fn add(&mut self, o: &Growth) {
        self.frames_sent += o.frames_sent;
        self.frames_received += o.frames_received;
        self.bytes_sent += o.bytes_sent;
        self.bytes_received += o.bytes_received;
        self.connects += o.connects;
        self.reconnects += o.reconnects;
        self.heartbeats_missed += o.heartbeats_missed;
        self.tls_rejected += o.tls_rejected;
        self.frames_cut += o.frames_cut;
        self.frames_unread += o.frames_unread;
        self.bytes_discarded += o.bytes_discarded;
        self.frames_refused += o.frames_refused;
        for (a, b) in self.abandoned.iter_mut().zip(o.abandoned) {
            *a += b;
        }
    }

    /// Adds the growth to the counters with these labels.
    fn emit(&self, labels: &[Label]) {
        for (name, n) in [
            ("relink_frames_sent_total", self.frames_sent),
            ("relink_frames_received_total", self.frames_received),
            ("relink_bytes_sent_total", self.bytes_sent),
            ("relink_bytes_received_total", self.bytes_received),
            ("relink_connects_total", self.connects),
            ("relink_reconnects_total", self.reconnects),
            ("relink_heartbeats_missed_total", self.heartbeats_missed),
            ("relink_tls_rejected_total", self.tls_rejected),
            ("relink_frames_cut_total", self.frames_cut),
            ("relink_frames_unread_total", self.frames_unread),
            ("relink_bytes_discarded_total", self.bytes_discarded),
            ("relink_frames_refused_total", self.frames_refused),
        ] {
            // Even by zero: every series exists from the first pass on.
            counter!(name, labels.iter()).increment(n);
        }
        for (reason, n) in AbandonReason::ALL.iter().zip(self.abandoned) {
            let mut with = labels.to_vec();
            with.push(Label::new("reason", reason.as_str()));
            counter!("relink_abandoned_total", with.iter()).increment(n);
        }
    }
}

impl Exporter {
    /// One pass: every link's growth since the last pass into the counters, the gauges set,
    /// the new round trips and outages into the histograms.
    fn tick(&mut self) {
        let rows = self.pool.rows();
        let mut states = [0usize; 7];
        let (mut outbox_frames, mut outbox_bytes) = (0u64, 0u64);
        let mut total = Growth::default();
        let mut last = HashMap::with_capacity(rows.len());
        for (id, name, m) in rows {
            states[m.state as usize] += 1;
            outbox_frames += m.outbox_frames;
            outbox_bytes += m.outbox_bytes;
            let before = self.last.get(&id);
            let growth = Growth::between(before, &m);
            let link_labels;
            let labels = if self.export.per_link {
                let mut l = self.labels.clone();
                l.push(Label::new("link", name.to_string()));
                link_labels = l;
                growth.emit(&link_labels);
                gauge!("relink_outbox_frames", link_labels.iter()).set(m.outbox_frames as f64);
                gauge!("relink_outbox_bytes", link_labels.iter()).set(m.outbox_bytes as f64);
                &link_labels
            } else {
                total.add(&growth);
                &self.labels
            };
            if growth.reconnects > 0 {
                if let Some(d) = m.last_outage {
                    histogram!("relink_outage_seconds", labels.iter()).record(d.as_secs_f64());
                }
            }
            let new_rtt = before.map_or(true, |b| b.last_rtt != m.last_rtt);
            if let (true, Some(rtt)) = (new_rtt, m.last_rtt) {
                histogram!("relink_rtt_seconds", labels.iter()).record(rtt.as_secs_f64());
            }
            last.insert(id, m);
        }
        self.last = last;
        if !self.export.per_link {
            total.emit(&self.labels);
            gauge!("relink_outbox_frames", self.labels.iter()).set(outbox_frames as f64);
            gauge!("relink_outbox_bytes", self.labels.iter()).set(outbox_bytes as f64);
        }
        for (state, n) in State::ALL.iter().zip(states) {
            let mut with = self.labels.clone();
            with.push(Label::new("state", state.name()));
            gauge!("relink_links", with.iter()).set(n as f64);
        }
    }
}
