//! Facts of the System V x86-64 psABI that more than one pass relies on.

use iced_x86::Register;

/// Integer argument registers, in order.
pub const ARGUMENTS: [Register; 6] =
    [Register::RDI, Register::RSI, Register::RDX, Register::RCX, Register::R8, Register::R9];

/// General-purpose registers a callee may clobber. `RAX` comes first so code that has
/// already saved it can take `&CALLER_SAVED[1..]`.
pub const CALLER_SAVED: [Register; 9] = [
    Register::RAX,
    Register::RCX,
    Register::RDX,
    Register::RSI,
    Register::RDI,
    Register::R8,
    Register::R9,
    Register::R10,
    Register::R11,
];
