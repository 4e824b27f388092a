fn main() {
    std::process::exit(0)
}
