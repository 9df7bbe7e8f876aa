//! The `asyncflow` binary: parse the command line, set up logging, run. No logic here.

use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = asyncflow::cli::Cli::parse();
    asyncflow::logging::init(cli.log_format);
    match asyncflow::cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("asyncflow: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
