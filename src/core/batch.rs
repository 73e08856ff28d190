//! Batch: many frames in one buffer, handed to a link in one call.

use std::fmt;

use bytes::{Bytes, BytesMut};

/// Frames stored back to back in one buffer, for [`Link::send_batch`](crate::Link::send_batch):
/// one admission check and one message to the IO thread for all of them, and no allocation per
/// frame.
///
/// Frames keep their order, in the batch and after every frame sent before it from the same
/// thread. Each frame still has an outcome of its own (sent, abandoned with an event, or refused
/// at the call) and counts as one frame in the metrics.
///
/// # Examples
/// ```
/// use relink::Batch;
///
/// let mut batch = Batch::with_capacity(3, 64);
/// batch.push(b"one");
/// batch.push(b"two");
/// batch.push(b"three");
/// assert_eq!(batch.len(), 3);
/// assert_eq!(batch.bytes(), 11);
/// assert_eq!(batch.iter().collect::<Vec<_>>(), [&b"one"[..], b"two", b"three"]);
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Batch {
    data: BytesMut,
    /// The end of each frame in `data`.
    ends: Vec<usize>,
}

impl fmt::Debug for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch")
            .field("frames", &self.len())
            .field("bytes", &self.bytes())
            .finish()
    }
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Batch {
        Batch::default()
    }

    /// An empty batch with room for `frames` frames of `bytes` bytes in total.
    pub fn with_capacity(frames: usize, bytes: usize) -> Batch {
        Batch {
            data: BytesMut::with_capacity(bytes),
            ends: Vec::with_capacity(frames),
        }
    }

    /// Appends a copy of `frame` (any bytes: `&[u8]`, `Vec<u8>`, `&str`, `Bytes`, ...).
    pub fn push(&mut self, frame: impl AsRef<[u8]>) {
        self.data.extend_from_slice(frame.as_ref());
        self.ends.push(self.data.len());
    }

    /// Frames in the batch.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether the batch holds no frame.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Bytes of all the frames together.
    pub fn bytes(&self) -> usize {
        self.data.len()
    }

    /// The frame at `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<&[u8]> {
        let end = *self.ends.get(index)?;
        Some(&self.data[self.start(index)..end])
    }

    /// The frames, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + Clone + '_ {
        BatchIter {
            batch: self,
            next: 0,
        }
    }

    /// Removes every frame, keeping the memory for reuse.
    pub fn clear(&mut self) {
        self.data.clear();
        self.ends.clear();
    }

    /// The frames, one `Vec` each.
    pub fn into_frames(self) -> Vec<Vec<u8>> {
        self.iter().map(<[u8]>::to_vec).collect()
    }

    /// A batch of the frames in `data` that end at `ends` (increasing, the last at
    /// `data.len()`).
    pub(crate) fn from_parts(data: BytesMut, ends: Vec<usize>) -> Batch {
        debug_assert!(ends.last().map_or(data.is_empty(), |&e| e == data.len()));
        Batch { data, ends }
    }

    /// The buffer, frozen without a copy, and the end of each frame in it.
    pub(crate) fn into_parts(self) -> (Bytes, Vec<usize>) {
        (self.data.freeze(), self.ends)
    }

    /// The frames, each a slice of the one buffer (no copy).
    pub(crate) fn into_shared_frames(self) -> Vec<Bytes> {
        let (data, ends) = self.into_parts();
        let mut start = 0;
        ends.into_iter()
            .map(|end| {
                let f = data.slice(start..end);
                start = end;
                f
            })
            .collect()
    }

    /// Where frame `index` starts in the buffer.
    pub(crate) fn start(&self, index: usize) -> usize {
        if index == 0 {
            0
        } else {
            self.ends[index - 1]
        }
    }

    /// Bytes of the first `k` frames.
    pub(crate) fn prefix_bytes(&self, k: usize) -> usize {
        if k == 0 {
            0
        } else {
            self.ends[k - 1]
        }
    }

    /// Splits off the frames from `at` on into a new batch; `self` keeps the first `at`.
    pub(crate) fn split_off(&mut self, at: usize) -> Batch {
        let cut = self.prefix_bytes(at);
        let data = self.data.split_off(cut);
        let ends = self
            .ends
            .split_off(at)
            .into_iter()
            .map(|e| e - cut)
            .collect();
        Batch { data, ends }
    }
}

impl<T: AsRef<[u8]>> Extend<T> for Batch {
    fn extend<I: IntoIterator<Item = T>>(&mut self, frames: I) {
        for f in frames {
            self.push(f.as_ref());
        }
    }
}

impl<T: AsRef<[u8]>> FromIterator<T> for Batch {
    fn from_iter<I: IntoIterator<Item = T>>(frames: I) -> Batch {
        let mut b = Batch::new();
        b.extend(frames);
        b
    }
}

/// The frames of a [`Batch`], in order.
#[derive(Debug, Clone)]
struct BatchIter<'a> {
    batch: &'a Batch,
    next: usize,
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        let f = self.batch.get(self.next)?;
        self.next += 1;
        Some(f)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.batch.len() - self.next;
        (n, Some(n))
    }
}

impl ExactSizeIterator for BatchIter<'_> {}
