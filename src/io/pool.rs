//! IO threads that links share.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use super::shared::Wake;
use super::worker::{Msg, Worker};
use crate::error::ConfigError;
use crate::view::PoolView;

/// How long [`IoPool::view`] waits for the threads' answers.
const VIEW_BOUND: Duration = Duration::from_secs(1);

/// A set of IO threads that links share: each link runs on one of them (the one serving the
/// fewest links when it is built), together with the other links placed there. Cheap to
/// clone; every clone names the same threads.
///
/// By default a link runs on [`IoPool::global`], one thread per core shared by every link not
/// given a pool, so a thousand links cost no thread of their own. A pool of your own, passed
/// to [`Builder::io_pool`](crate::Builder::io_pool), keeps some links apart from the others
/// (their own threads, their own budgets); `IoPool::new(1)` given to one link is a thread of
/// its own, which exits with the link.
///
/// The threads start with the pool. A thread with no link waits without using the CPU; once
/// every clone of the pool is dropped, each thread exits when its last link is closed.
///
/// # Examples
/// ```no_run
/// use relink::{IoPool, Link};
///
/// let pool = IoPool::new(2)?;
/// let links = (0..100)
///     .map(|_| Link::builder("tcp://127.0.0.1:6379").io_pool(&pool).build())
///     .collect::<Result<Vec<_>, _>>()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct IoPool {
    workers: Arc<Vec<Arc<WorkerRef>>>,
}

/// A handle on one IO thread: its channel and its wake-up. When the last one goes (the pool's
/// and every link's), the thread is told it will get no new link.
#[derive(Debug)]
pub(crate) struct WorkerRef {
    pub(crate) tx: Sender<Msg>,
    pub(crate) wake: Arc<Wake>,
}

impl Drop for WorkerRef {
    fn drop(&mut self) {
        self.wake.orphaned.store(true, Ordering::SeqCst);
        self.wake.wake();
    }
}

impl fmt::Debug for IoPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IoPool")
            .field("threads", &self.workers.len())
            .field("links", &self.links())
            .finish()
    }
}

impl IoPool {
    /// A pool of `threads` IO threads, started now.
    ///
    /// # Errors
    /// [`ConfigError::ZeroLimit`] for no thread; [`ConfigError::NoRoom`] when a thread, its
    /// epoll set or its eventfd cannot be made.
    pub fn new(threads: usize) -> Result<IoPool, ConfigError> {
        if threads == 0 {
            return Err(ConfigError::ZeroLimit { name: "threads" });
        }
        let workers = (0..threads)
            .map(|_| start_thread())
            .collect::<Result<Vec<_>, _>>()?;
        Ok(IoPool {
            workers: Arc::new(workers),
        })
    }

    /// The process-wide pool: one thread per core (`std::thread::available_parallelism`),
    /// started by the first call; its threads never exit (they wait without CPU when idle).
    ///
    /// # Errors
    /// As [`IoPool::new`], if the first call cannot start the threads.
    pub fn global() -> Result<IoPool, ConfigError> {
        static GLOBAL: OnceLock<Result<IoPool, ConfigError>> = OnceLock::new();
        GLOBAL
            .get_or_init(|| {
                let n = std::thread::available_parallelism().map_or(1, |n| n.get());
                IoPool::new(n)
            })
            .clone()
    }

    /// The number of threads.
    pub fn threads(&self) -> usize {
        self.workers.len()
    }

    /// Links running on the pool's threads now (built and not yet closed).
    pub fn links(&self) -> usize {
        self.workers
            .iter()
            .map(|w| w.wake.links.load(Ordering::SeqCst))
            .sum()
    }

    /// Every link of the pool at once: links per state, their counters summed, and the `top`
    /// links without a connection for longest and with the most reconnects, by name.
    ///
    /// Each thread answers for its links in one pass of its loop (the whole call took
    /// 0.5–0.8 ms at 4 500 links on two threads: `benches/links.rs` measures it); the call
    /// waits for every thread, a second at most in all (a thread that does not answer in
    /// time is left out of [`PoolView::threads`]). Links built without
    /// [`Builder::io_pool`](crate::Builder::io_pool) have a pool of their own and are not in any other pool's view.
    ///
    /// See the example on [`PoolView`].
    ///
    /// [`Builder::io_pool`](crate::Builder::io_pool): crate::Builder::io_pool
    pub fn view(&self, top: usize) -> PoolView {
        let mut view = PoolView::default();
        for part in self.ask(|reply| Msg::View { top, reply }) {
            view.merge(part, top);
        }
        view
    }

    /// Asks every thread (`make` builds the question around the reply channel) and takes
    /// their answers, a second at most in all.
    fn ask<T>(&self, make: impl Fn(crossbeam_channel::Sender<T>) -> Msg) -> Vec<T> {
        let (tx, rx) = crossbeam_channel::bounded(self.workers.len());
        let mut asked = 0;
        for w in self.workers.iter() {
            if w.tx.send(make(tx.clone())).is_ok() {
                w.wake.wake();
                asked += 1;
            }
        }
        drop(tx);
        let deadline = Instant::now() + VIEW_BOUND;
        (0..asked)
            .map_while(|_| rx.recv_deadline(deadline).ok())
            .collect()
    }

    /// Every link of the pool, with its id, name and snapshot (for the metrics export);
    /// bounded as [`view`](IoPool::view) is.
    #[cfg(feature = "metrics")]
    pub(crate) fn rows(&self) -> Vec<super::worker::LinkRow> {
        self.ask(Msg::Rows).into_iter().flatten().collect()
    }

    /// The thread serving the fewest links, counted as serving one more.
    pub(crate) fn place(&self) -> Arc<WorkerRef> {
        let w = self
            .workers
            .iter()
            .min_by_key(|w| w.wake.links.load(Ordering::SeqCst))
            .expect("a pool has at least one thread");
        w.wake.links.fetch_add(1, Ordering::SeqCst);
        w.clone()
    }
}

fn start_thread() -> Result<Arc<WorkerRef>, ConfigError> {
    let no_room = |what: &str, e: std::io::Error| ConfigError::NoRoom(format!("{what}: {e}"));
    super::resolver::start().map_err(|e| no_room("resolver threads", e))?;
    super::sleep::start().map_err(|e| no_room("timer thread", e))?;
    let wake = Arc::new(Wake::new().map_err(|e| no_room("eventfd", e))?);
    let (tx, rx) = crossbeam_channel::unbounded();
    let worker = Worker::new(wake.clone(), rx).map_err(|e| no_room("epoll", e))?;
    std::thread::Builder::new()
        .name("relink-io".into())
        .spawn(move || worker.run())
        .map_err(|e| no_room("IO thread", e))?;
    Ok(Arc::new(WorkerRef { tx, wake }))
}
