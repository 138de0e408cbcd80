//! Placeholder replaced by the benchmark (see benches/README.md).
fn main() {
    eprintln!("the benchmark is being written; see benches/README.md");
    std::process::exit(2);
}
