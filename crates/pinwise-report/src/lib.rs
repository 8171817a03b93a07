//! pinwise-report: what a person reads after a trace.
