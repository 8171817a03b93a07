//! Prints what this machine lets the tracer do (`pinwise_trace::capabilities()`), as JSON.
//! `cargo run -p pinwise-trace --example capabilities` (as root).
fn main() {
    let caps = pinwise_trace::capabilities();
    println!(
        "{}",
        serde_json::to_string_pretty(&caps).expect("capabilities serialize")
    );
}
