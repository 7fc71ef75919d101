//! The control file (`STINT_CONTROL`): parsed here, without allocation, by the runtime at
//! start and by `stint` tooling alike (being written).
