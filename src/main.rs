//! The `asyncflow` binary: parse the command line, set up logging, run. No logic here.

use clap::Parser;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let filter = EnvFilter::try_from_env("ASYNCFLOW_LOG").unwrap_or_else(|_| EnvFilter::new("asyncflow=info,warn"));
    // colours only for a person at a terminal: a log redirected to a file gets none
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr()) && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi).init();
    let cli = asyncflow::cli::Cli::parse();
    match asyncflow::cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("asyncflow: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
