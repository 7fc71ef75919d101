//! Plain old data: the one mechanism that turns every on-file and in-image struct of this
//! crate into bytes and back, so that a struct's field list is written exactly once (DESIGN
//! D9, D18).
//!
//! A struct declared with [`pod_struct!`] is `#[repr(C)]`, made only of [`Pod`] fields, and
//! proven at compile time to have no padding (its size equals the sum of its fields' sizes).
//! Any byte string of the right length is then a valid value of it, and every byte of a value
//! is initialised, which is what [`Pod::read_from`], [`Pod::as_bytes`] and [`Pod::write_to`]
//! rely on. Adding a field to such a struct needs no other edit for it to be read or written.
//!
//! Why not `bytemuck` or `zerocopy`: `rewriter/core/build.rs` compiles this crate with bare
//! `rustc` for the runtime image (no cargo, no dependency resolution), so the crate has no
//! dependencies in that build; this module is the few lines of those crates we need.
//!
//! All fields are little-endian integers in the file; we read and write them in the host's
//! byte order, so the crate refuses to compile on a big-endian target.
//!
//! # Safety
//! This module opts into `unsafe`: `Pod` is an `unsafe trait` (an implementation promises
//! "no padding, every bit pattern valid"), and its provided methods view a value as bytes and
//! bytes as a value. [`pod_struct!`] implements it only after checking both conditions at
//! compile time; the primitive and array impls below hold by the language's definition.
#![allow(unsafe_code)]

use core::mem::size_of;

#[cfg(not(target_endian = "little"))]
compile_error!("stint-layout: the profile file is little-endian; this crate reads it in host byte order");

/// A type whose every bit pattern is a valid value and that has no padding bytes.
///
/// # Safety
/// Implement only for types that are `#[repr(C)]` (or primitive), contain only `Pod` fields,
/// and have no padding. Use [`pod_struct!`], which checks that, instead of implementing it by
/// hand.
pub unsafe trait Pod: Copy + 'static {
    /// The value stored at `bytes[offset..offset + size_of::<Self>()]` (any alignment);
    /// `None` if that range is not inside `bytes`.
    #[inline]
    fn read_from(bytes: &[u8], offset: usize) -> Option<Self> {
        let src = bytes.get(offset..offset.checked_add(size_of::<Self>())?)?;
        // Safety: `src` holds exactly size_of::<Self>() initialised bytes, any bit pattern is
        // a valid `Self` (the trait's contract), and read_unaligned needs no alignment.
        Some(unsafe { core::ptr::read_unaligned(src.as_ptr().cast::<Self>()) })
    }

    /// The value's bytes, as they lie in memory and in the file.
    #[inline]
    fn as_bytes(&self) -> &[u8] {
        // Safety: `self` is a valid reference to size_of::<Self>() bytes, all initialised
        // (no padding: the trait's contract), borrowed for as long as the result.
        unsafe { core::slice::from_raw_parts((self as *const Self).cast::<u8>(), size_of::<Self>()) }
    }

    /// Store the value at `bytes[offset..]`; `None` (and nothing written) if it does not fit.
    #[inline]
    fn write_to(&self, bytes: &mut [u8], offset: usize) -> Option<()> {
        let dst = bytes.get_mut(offset..offset.checked_add(size_of::<Self>())?)?;
        dst.copy_from_slice(self.as_bytes());
        Some(())
    }

    /// The value whose bytes are all zero.
    #[inline]
    fn zeroed() -> Self {
        // Safety: all-zero bytes are a valid `Self` (any bit pattern is).
        unsafe { core::mem::zeroed() }
    }
}

macro_rules! impl_pod_primitive {
    ($($t:ty),*) => {
        // Safety: integers have no padding and every bit pattern is a value.
        $(unsafe impl Pod for $t {})*
    };
}
impl_pod_primitive!(u8, u16, u32, u64, i8, i16, i32, i64);

// Safety: an array of `Pod` has no padding (an element's size is a multiple of its
// alignment) and every bit pattern of every element is valid.
unsafe impl<T: Pod, const N: usize> Pod for [T; N] {}

/// Declares a `#[repr(C)]` struct and implements [`Pod`] for it after checking, at compile
/// time, that every field is `Pod` and that the struct has no padding (write explicit `_pad`
/// fields where alignment would insert some). Attributes (docs, derives) pass through.
///
/// ```text
/// pod_struct! {
///     /// One entry.
///     #[derive(Clone, Copy, Debug, Default)]
///     pub struct Entry { pub tsc: u64, pub state: u32, pub object: u32 }
/// }
/// ```
macro_rules! pod_struct {
    ($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $f:ident: $t:ty),* $(,)? }) => {
        $(#[$m])*
        #[repr(C)]
        pub struct $name { $($(#[$fm])* pub $f: $t),* }

        // Safety: repr(C), every field is Pod (checked below) and there is no padding (the
        // size assertion below), so every bit pattern is a valid value and no byte is
        // uninitialised.
        #[allow(unsafe_code)]
        unsafe impl $crate::pod::Pod for $name {}

        const _: () = {
            const fn field_is_pod<T: $crate::pod::Pod>() {}
            $(field_is_pod::<$t>();)*
            assert!(
                core::mem::size_of::<$name>() == 0 $(+ core::mem::size_of::<$t>())*,
                concat!(stringify!($name), " has padding: add explicit _pad fields")
            );
        };
    };
}
pub(crate) use pod_struct;

#[cfg(test)]
mod tests {
    use super::Pod;

    pod_struct! {
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct Sample { pub a: u64, pub b: u32, pub c: [u8; 4], pub d: i64 }
    }

    #[test]
    fn round_trips_at_any_offset() {
        let s = Sample { a: 0x0102_0304_0506_0708, b: 9, c: *b"wxyz", d: -2 };
        let mut buf = [0u8; 64];
        for off in [0, 1, 3, 64 - 24] {
            s.write_to(&mut buf, off).unwrap();
            assert_eq!(Sample::read_from(&buf, off), Some(s));
        }
        assert_eq!(&s.as_bytes()[..8], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(&s.as_bytes()[12..16], b"wxyz");
    }

    #[test]
    fn out_of_range_is_none() {
        let s = Sample::zeroed();
        let mut buf = [0u8; 24];
        assert_eq!(Sample::read_from(&buf, 1), None);
        assert_eq!(Sample::read_from(&buf, usize::MAX), None);
        assert_eq!(s.write_to(&mut buf, 1), None);
        assert_eq!(s.write_to(&mut buf, usize::MAX - 3), None);
        assert_eq!(Sample::read_from(&buf, 0), Some(Sample::default()));
    }
}
