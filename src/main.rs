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
        let code = e.downcast_ref::<Exit>().map(|x| x.code).unwrap_or(1);
        eprintln!("outpost: {e:#}");
        std::process::exit(code);
    }
}
