//! A value on a cache line of its own.

/// A value on a cache line of its own, so that producers and the IO thread do not slow each
/// other down by writing neighbouring fields.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Padded<T>(pub T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}
