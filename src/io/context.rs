//! The libzmq context that links share.

use std::sync::{Arc, OnceLock};

use super::ffi::RawContext;
use crate::error::ConfigError;

/// Sockets a relink context allows (libzmq's default is 1023).
pub const MAX_SOCKETS: u32 = 16_384;

/// A libzmq context that links share. Every link uses three of its sockets.
///
/// By default all links of a process share one (`Context::global()`), so a thousand links do
/// not start a thousand libzmq IO threads.
///
/// # Examples
/// Links of one part of a program in a context of their own, with room for two links:
/// ```
/// use std::time::Duration;
/// use relink::Link;
/// use relink::error::ConfigError;
/// use relink::pool::Context;
///
/// # let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
/// let endpoint = format!("tcp://127.0.0.1:{port}"); // nobody listens here
/// let ctx = Context::with_max_sockets(6)?;
/// let a = Link::builder(&endpoint).context(&ctx).build()?;
/// let b = Link::builder(&endpoint).context(&ctx).build()?;
/// // A third link finds no socket left.
/// let c = Link::builder(&endpoint).context(&ctx).build();
/// assert!(matches!(c, Err(ConfigError::NoRoom(_))));
/// a.close(Duration::from_millis(50));
/// b.close(Duration::from_millis(50));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Context {
    pub(super) raw: Arc<RawContext>,
}

impl Context {
    /// A new context allowing `max_sockets` sockets (three per link).
    pub fn with_max_sockets(max_sockets: u32) -> Result<Context, ConfigError> {
        let raw = RawContext::new(max_sockets).map_err(|e| ConfigError::Zmq(e.to_string()))?;
        Ok(Context { raw: Arc::new(raw) })
    }

    /// The process-wide context (16384 sockets: about 5000 links; each link also needs about
    /// five file descriptors).
    pub fn global() -> Result<Context, ConfigError> {
        static GLOBAL: OnceLock<Result<Context, ConfigError>> = OnceLock::new();
        GLOBAL
            .get_or_init(|| Context::with_max_sockets(MAX_SOCKETS))
            .clone()
    }
}
