//! The `asyncflow` binary: parse the command line, set up logging and traces, run. No logic here.

use clap::Parser;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = asyncflow::cli::Cli::parse();
    // flushes the spans when main returns
    let (_exporter, tracer) = match asyncflow::trace::start(&cli.trace) {
        Ok(started) => started.unzip(),
        Err(e) => {
            eprintln!("asyncflow: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    asyncflow::logging::init(cli.log_format, tracer);
    match asyncflow::cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("asyncflow: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
