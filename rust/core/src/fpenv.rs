//! The floating-point environment the kernels run in.
//!
//! Exact rounding needs subnormals and round-to-nearest arithmetic. A caller's thread
//! may have flush-to-zero and denormals-are-zero set (a library built with
//! `-ffast-math`, or `torch.set_flush_denormal(True)`), or another rounding
//! direction; threads started from it inherit them. [`clean`] runs a kernel with
//! those controls cleared and puts them back after, keeping the status flags the
//! kernel raised; [`set_clean`] clears them for good on the pool's threads.

/// MXCSR's flush-to-zero (bit 15), rounding control (bits 13-14) and
/// denormals-are-zero (bit 6).
#[cfg(target_arch = "x86_64")]
const CONTROLS: u32 = (1 << 15) | (3 << 13) | (1 << 6);
/// MXCSR's status flags (bits 0-5).
#[cfg(target_arch = "x86_64")]
const FLAGS: u32 = 0x3f;

#[cfg(target_arch = "x86_64")]
fn read() -> u32 {
    let mut v = 0u32;
    // SAFETY: stmxcsr stores the 4-byte register at a valid, writable address.
    unsafe { std::arch::asm!("stmxcsr [{}]", in(reg) &mut v, options(nostack, preserves_flags)) };
    v
}

#[cfg(target_arch = "x86_64")]
fn write(v: u32) {
    // SAFETY: ldmxcsr of a value whose reserved bits (16-31) come from a value read
    // from the register, so stay zero. (Without `readonly` or `nomem` the asm is a
    // barrier to memory accesses: the kernels' loads and stores, and so the arithmetic
    // between them, stay on their side of it.)
    unsafe { std::arch::asm!("ldmxcsr [{}]", in(reg) &v, options(nostack, preserves_flags)) };
}

/// Clear this thread's flush-to-zero, denormals-are-zero and rounding direction
/// (the pool's threads, once at their start).
pub fn set_clean() {
    #[cfg(target_arch = "x86_64")]
    {
        let v = read();
        if v & CONTROLS != 0 {
            write(v & !CONTROLS);
        }
    }
}

/// While alive, this thread's flush-to-zero, denormals-are-zero and rounding
/// direction are cleared; dropped, they are set back as they were, and the status
/// flags raised meanwhile stay.
pub struct Clean {
    #[cfg(target_arch = "x86_64")]
    saved: u32,
}

impl Clean {
    /// Clear the controls (a read of MXCSR where they are clear already).
    pub fn enter() -> Clean {
        #[cfg(target_arch = "x86_64")]
        {
            let saved = read();
            if saved & CONTROLS != 0 {
                write(saved & !CONTROLS);
            }
            Clean { saved }
        }
        #[cfg(not(target_arch = "x86_64"))]
        Clean {}
    }
}

impl Drop for Clean {
    fn drop(&mut self) {
        #[cfg(target_arch = "x86_64")]
        if self.saved & CONTROLS != 0 {
            write((self.saved & !FLAGS) | (read() & FLAGS));
        }
    }
}

/// `f` run under [`Clean`] (also set back when `f` panics).
pub fn clean<R>(f: impl FnOnce() -> R) -> R {
    let _clean = Clean::enter();
    f()
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// The controls are cleared inside and restored after; flags raised inside stay.
    #[test]
    fn clean_clears_and_restores() {
        let before = read();
        write((before & !FLAGS) | CONTROLS);
        let (tiny, two) = (f32::from_bits(1), 2.0f32);
        let mut product = 0f32;
        // (Through memory, as a kernel's data goes: the arithmetic stays inside.)
        // SAFETY: volatile accesses of locals.
        let inside = clean(|| unsafe {
            let p = std::ptr::read_volatile(&tiny) * std::ptr::read_volatile(&two);
            std::ptr::write_volatile(&mut product, p);
            read()
        });
        let after = read();
        write(before);
        assert_eq!(inside & CONTROLS, 0);
        assert_eq!(product, f32::from_bits(2), "a subnormal kept inside");
        assert_eq!(after & CONTROLS, CONTROLS);
    }
}
