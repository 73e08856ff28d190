//! The client a tokio user would write instead of relink: a runtime thread owns the
//! connection, tokio-util's `FramedWrite<_, LengthDelimitedCodec>` (and `FramedRead` for
//! replies) on it, behind an mpsc handle that application threads send frames through.
//! Optionally over stubborn-io's `StubbornTcpStream`, which redials by itself.
//!
//! The writer task feeds every frame waiting in the channel into the codec and flushes once
//! the channel is empty, so a burst becomes few writes (what a careful tokio user does; a
//! flush per frame would be much slower).

use std::net::SocketAddr;
use std::thread::{self, JoinHandle};

use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};

/// Frames queued in the handle's channel before `send` waits, for a client that makes round
/// trips (one frame in flight); a throughput run passes a larger channel to `with_channel`.
const CHANNEL: usize = 1024;
/// Frames fed into the codec between two flushes at most.
const FEED_MAX: usize = 1024;

/// A tokio FramedWrite client behind an mpsc handle, with its runtime thread.
pub struct TokioClient {
    tx: Option<mpsc::Sender<Bytes>>,
    replies: mpsc::Receiver<BytesMut>,
    thread: Option<JoinHandle<()>>,
}

impl TokioClient {
    /// Connects to `addr` (through stubborn-io if `stubborn`) on a runtime thread of its own,
    /// with a channel of 1 024 frames.
    pub fn connect(addr: SocketAddr, stubborn: bool) -> TokioClient {
        TokioClient::with_channel(addr, stubborn, CHANNEL)
    }

    /// As [`connect`](TokioClient::connect), with room for `channel` frames in the handle's
    /// channel before `send` waits.
    pub fn with_channel(addr: SocketAddr, stubborn: bool, channel: usize) -> TokioClient {
        let (tx, rx) = mpsc::channel::<Bytes>(channel);
        let (reply_tx, replies) = mpsc::channel::<BytesMut>(CHANNEL);
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let thread = thread::Builder::new()
            .name("tokio-client".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                rt.block_on(async move {
                    if stubborn {
                        let stream = stubborn_io::StubbornTcpStream::connect(addr)
                            .await
                            .expect("stubborn connect");
                        let (r, w) = tokio::io::split(stream);
                        let _ = ready_tx.send(());
                        serve(r, w, rx, reply_tx).await;
                    } else {
                        let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
                        stream.set_nodelay(true).expect("nodelay");
                        let (r, w) = stream.into_split();
                        let _ = ready_tx.send(());
                        serve(r, w, rx, reply_tx).await;
                    }
                });
            })
            .expect("spawn the runtime thread");
        ready.recv().expect("the client connected");
        TokioClient {
            tx: Some(tx),
            replies,
            thread: Some(thread),
        }
    }

    /// Hands one frame to the runtime thread, waiting while the channel is full.
    pub fn send(&self, frame: Bytes) {
        self.tx
            .as_ref()
            .expect("open")
            .blocking_send(frame)
            .expect("the writer task is gone");
    }

    /// Waits for the next reply frame.
    pub fn recv(&mut self) -> BytesMut {
        self.replies
            .blocking_recv()
            .expect("the reader task is gone")
    }

    /// Closes the handle; the writer flushes what is left and the runtime thread ends.
    pub fn finish(mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            t.join().expect("the runtime thread panicked");
        }
    }
}

async fn serve<R, W>(r: R, w: W, mut rx: mpsc::Receiver<Bytes>, reply_tx: mpsc::Sender<BytesMut>)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin,
{
    let reader = tokio::spawn(async move {
        let mut frames = FramedRead::new(r, LengthDelimitedCodec::new());
        while let Some(Ok(f)) = frames.next().await {
            if reply_tx.send(f).await.is_err() {
                break;
            }
        }
    });
    let mut sink = FramedWrite::new(w, LengthDelimitedCodec::new());
    while let Some(first) = rx.recv().await {
        sink.feed(first).await.expect("feed");
        let mut fed = 1;
        while fed < FEED_MAX {
            match rx.try_recv() {
                Ok(f) => {
                    sink.feed(f).await.expect("feed");
                    fed += 1;
                }
                Err(_) => break,
            }
        }
        SinkExt::<Bytes>::flush(&mut sink).await.expect("flush");
    }
    let _ = SinkExt::<Bytes>::close(&mut sink).await;
    reader.abort();
}
