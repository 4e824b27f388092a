use clap::Parser;
use outpost::cli::{self, Cli, Exit, EXIT_USAGE};

fn main() {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            // --help and --version are not errors; everything else is bad usage.
            let code = if e.use_stderr() { EXIT_USAGE } else { 0 };
            std::process::exit(code);
        }
    };
    if let Err(e) = cli::run(cli) {
        match e.downcast_ref::<Exit>() {
            // Says everything itself: one line, no repeated cause chain.
            Some(x) => {
                eprintln!("outpost: {}", x.message);
                std::process::exit(x.code);
            }
            None => {
                eprintln!("outpost: {}", outpost::cli::error_line(&e));
                std::process::exit(1);
            }
        }
    }
}
