//! One module per subcommand. Each has a clap `Args` struct and a `run` function.
pub mod bench;
pub mod calibrate;
pub mod demo;
pub mod diff;
pub mod doctor;
pub mod export;
pub mod report;
pub mod run;
pub mod trace;
