//! Typed handles of the engine's objects: a handle of one kind cannot be
//! passed where another is expected. Each wraps the number the C API uses;
//! `get` and `From` convert at that boundary.

/// Declares a handle type over the `u32` the verbs C API carries.
macro_rules! handle {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(transparent)]
        pub struct $name(u32);

        impl $name {
            /// The handle of the raw number `raw` (the C API's).
            pub const fn new(raw: u32) -> $name {
                $name(raw)
            }

            /// The raw number (the C API's).
            pub const fn get(self) -> u32 {
                self.0
            }
        }

        impl From<u32> for $name {
            fn from(raw: u32) -> $name {
                $name(raw)
            }
        }

        impl From<$name> for u32 {
            fn from(h: $name) -> u32 {
                h.0
            }
        }

        impl std::fmt::Display for $name {
            /// The number, as the C API's tools print it.
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Display::fmt(&self.0, f)
            }
        }

        impl std::fmt::LowerHex for $name {
            /// The number in hex, as perftest and rdma-core's examples print a QPN.
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::LowerHex::fmt(&self.0, f)
            }
        }

        impl std::str::FromStr for $name {
            type Err = std::num::ParseIntError;

            /// A decimal number, as [`Display`](std::fmt::Display) writes it.
            fn from_str(s: &str) -> Result<$name, Self::Err> {
                s.parse().map($name)
            }
        }
    };
}

handle! {
    /// A protection domain of a device.
    PdHandle
}

handle! {
    /// A completion queue of a device.
    CqHandle
}

handle! {
    /// A shared receive queue of a device.
    SrqHandle
}

handle! {
    /// A queue pair's number (24 bits on the wire).
    Qpn
}
