//! pinwise-cuda: the CUDA driver API, loaded at run time.
