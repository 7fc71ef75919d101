//! What a freestanding image needs that `core` expects from elsewhere: the `mem*` functions
//! the compiler may call, and a panic handler. Only compiled into the embedded image
//! (`--cfg stint_image`); host builds of this crate (tests, clippy) use libc's.
#![allow(unsafe_code)]

use core::arch::asm;

/// Safety: standard memcpy contract (non-overlapping, valid for `n` bytes).
#[no_mangle]
pub unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // Safety: rep movsb copies exactly n bytes forward; DF is clear per the psABI.
    unsafe {
        asm!("rep movsb", inout("rdi") dst => _, inout("rsi") src => _, inout("rcx") n => _, options(nostack, preserves_flags))
    };
    dst
}

/// Safety: standard memmove contract.
#[no_mangle]
pub unsafe extern "C" fn memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    if (dst as usize) <= (src as usize) || (dst as usize) >= (src as usize).wrapping_add(n) {
        // Safety: forward copy is correct when dst is below src or the ranges are disjoint.
        return unsafe { memcpy(dst, src, n) };
    }
    let mut i = n;
    while i > 0 {
        i -= 1;
        // Safety: i < n, both ranges valid for n bytes; volatile keeps this a loop.
        unsafe { core::ptr::write_volatile(dst.add(i), core::ptr::read_volatile(src.add(i))) };
    }
    dst
}

/// Safety: standard memset contract.
#[no_mangle]
pub unsafe extern "C" fn memset(dst: *mut u8, c: i32, n: usize) -> *mut u8 {
    // Safety: rep stosb stores exactly n bytes forward.
    unsafe {
        asm!("rep stosb", inout("rdi") dst => _, inout("rcx") n => _, in("al") c as u8, options(nostack, preserves_flags))
    };
    dst
}

/// Safety: standard memcmp contract.
#[no_mangle]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    for i in 0..n {
        // Safety: i < n, both valid for n bytes.
        let (x, y) = unsafe { (core::ptr::read_volatile(a.add(i)), core::ptr::read_volatile(b.add(i))) };
        if x != y {
            return x as i32 - y as i32;
        }
    }
    0
}

/// Safety: standard bcmp contract.
#[no_mangle]
pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // Safety: forwarded.
    unsafe { memcmp(a, b, n) }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // A bug in the runtime: stop here rather than corrupt the program.
    // Safety: ud2 raises SIGILL; it never returns.
    unsafe { asm!("ud2", options(noreturn)) }
}

/// Safety: standard strlen contract (NUL-terminated string). LLVM turns byte-scanning loops
/// into calls to this, so the image must have it.
#[no_mangle]
pub unsafe extern "C" fn strlen(s: *const u8) -> usize {
    let mut n = 0;
    // Safety: the string is NUL-terminated; volatile keeps this from becoming strlen again.
    while unsafe { core::ptr::read_volatile(s.add(n)) } != 0 {
        n += 1;
    }
    n
}
