//! pinwise-preload: pinwise for unmodified programs, through LD_PRELOAD.
