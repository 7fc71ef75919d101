//! The runtime image built by `build.rs` from rt-lib: bytes to place in the new code segment
//! and the offsets of its entry points within them.
include!(concat!(env!("OUT_DIR"), "/rt_image.rs"));
