//! Typed indices into the engine's arenas.
//!
//! Each id is a `#[repr(transparent)]` newtype over a `u32` and reads back as an array index
//! with `.idx()`. An id that may be absent is an `Option<Id>`: the ids that live in the packet
//! pool's hot structures ([`PktId`], [`PortId`]) keep a niche (they store the index plus one
//! in a `NonZeroU32`, so index `u32::MAX` is the one value they cannot hold), which makes
//! `Option<PktId>` and `Option<PortId>` 4 bytes, the size of the raw `u32` with a `u32::MAX`
//! sentinel they replace. Making one is branch-free (a saturating add) and `.idx()` is one
//! subtraction, usually folded into the address arithmetic.
//!
//! Node and link ids are [`reducelab_topo::NodeId`] and [`reducelab_topo::LinkId`], the
//! topology's own.

use std::fmt;
use std::num::NonZeroU32;

macro_rules! niche_id {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[repr(transparent)]
        #[derive(Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name(NonZeroU32);

        impl $name {
            /// The id of index `i` (`i < u32::MAX`; `u32::MAX` would alias `u32::MAX - 1`, which
            /// debug builds catch).
            #[inline]
            pub fn new(i: u32) -> Self {
                debug_assert!(i < u32::MAX, concat!(stringify!($name), " index out of range"));
                $name(NonZeroU32::MIN.saturating_add(i))
            }
            /// The id of array index `i`.
            #[inline]
            pub fn from_idx(i: usize) -> Self {
                debug_assert!(i < u32::MAX as usize);
                Self::new(i as u32)
            }
            /// The index as a `u32`.
            #[inline]
            pub fn get(self) -> u32 {
                self.0.get() - 1
            }
            /// The index into the arrays this id addresses.
            #[inline]
            pub fn idx(self) -> usize {
                self.get() as usize
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self.get())
            }
        }
    };
}

niche_id!(
    /// A packet in the pool (see [`crate::packet`]). Workloads hold one while a protocol packet
    /// is in their custody ([`crate::Workload::on_app_at_switch`]).
    PktId
);

niche_id!(
    /// A global port: one output direction of a link, numbered node by node (node `n`'s local
    /// port `p` is `PortId(port_base[n] + p)`). The same id names the ingress buffer of the
    /// reverse direction at that node.
    PortId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_keep_the_niche() {
        for i in [0u32, 1, 7, 1 << 20, u32::MAX - 1] {
            assert_eq!(PktId::new(i).get(), i);
            assert_eq!(PortId::from_idx(i as usize).idx(), i as usize);
        }
        assert_eq!(std::mem::size_of::<Option<PktId>>(), 4);
        assert_eq!(std::mem::size_of::<Option<PortId>>(), 4);
        assert_ne!(PktId::new(3), PktId::new(4));
        assert_eq!(format!("{:?}", PortId::new(12)), "PortId(12)");
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "PktId index out of range")]
    fn the_sentinel_index_is_not_an_id() {
        PktId::new(u32::MAX);
    }
}
