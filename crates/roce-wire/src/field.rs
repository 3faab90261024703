//! Big-endian field access shared by the header views (and by `roce-cm`'s
//! MAD layouts). Callers have checked the buffer length: these index the
//! slice and panic on a short one.

/// The big-endian `u16` at `at`.
pub fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// The big-endian 24-bit field at `at`.
pub fn u24_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
}

/// The big-endian `u32` at `at`.
pub fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The big-endian `u64` at `at`.
pub fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(x)
}

/// Writes `v` big-endian at `at`.
pub fn set_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// Writes the low 24 bits of `v` big-endian at `at`.
pub fn set_u24(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
}

/// Writes `v` big-endian at `at`.
pub fn set_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

/// Writes `v` big-endian at `at`.
pub fn set_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

/// Fails with [`WireError::Truncated`](crate::WireError::Truncated) when
/// `have` is shorter than `need`.
pub(crate) fn check_len(what: &'static str, need: usize, have: usize) -> Result<(), crate::WireError> {
    if have < need { Err(crate::WireError::Truncated { what, need, have }) } else { Ok(()) }
}

/// Declares a zero-copy header view: the struct and its length-checked
/// constructors. Field accessors are written beside each header's layout.
macro_rules! header_view {
    ($(#[$doc:meta])* $view:ident, $name:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $view<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $view<T> {
            /// Wraps `buffer` without checking its length; accessors panic if
            /// it is shorter than [`LEN`]. Prefer [`Self::new_checked`].
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            #[doc = concat!("Wraps `buffer` after checking it holds a whole ", $name, ".")]
            pub fn new_checked(buffer: T) -> Result<Self, crate::WireError> {
                crate::field::check_len($name, LEN, buffer.as_ref().len())?;
                Ok(Self { buffer })
            }

            /// The underlying buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            fn bytes(&self) -> &[u8] {
                self.buffer.as_ref()
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            #[allow(dead_code)]
            fn bytes_mut(&mut self) -> &mut [u8] {
                self.buffer.as_mut()
            }
        }
    };
}
pub(crate) use header_view;
