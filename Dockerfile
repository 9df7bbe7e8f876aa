# asyncflow's container image: the binary as the entry point, the example functions baked in at
# /functions (mount your own folder over it), run as a non-root user.
#
#   docker build -t asyncflow .
#   docker run --rm -e DATABASE_URL=postgres://... asyncflow migrate
#   docker run --rm -e DATABASE_URL=postgres://... -v "$PWD/functions:/functions:ro" asyncflow worker
#
# The worker runs correctly as PID 1: it collects the processes its functions leave behind and
# handles SIGTERM (in-flight calls get --shutdown-grace, then their tasks are handed back), so
# no init (--init, tini) is needed.

# --- build --------------------------------------------------------------------------------------
FROM rust:1-bookworm AS builder
WORKDIR /src
COPY . .
# the binary, and the Rust example function (its function.toml builds it at the worker's start
# in a source tree; the image ships it built instead)
RUN cargo build --release --locked --bin asyncflow -p asyncflow \
 && cargo build --release --locked -p wordcount-rs

# --- run ----------------------------------------------------------------------------------------
FROM debian:bookworm-slim
# No PostgreSQL client library: the driver is pure Rust, TLS is rustls. ca-certificates for TLS to
# the database and to HTTP functions; python3 for the example functions.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates python3 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --home-dir /nonexistent --shell /usr/sbin/nologin asyncflow
COPY --from=builder /src/target/release/asyncflow /usr/local/bin/asyncflow
COPY --from=builder /src/functions /functions
# the function libraries the examples import (functions/*/run and functions/sdk point into it)
COPY --from=builder /src/packages /packages
# the Rust example as a built program: no cargo in this image
COPY --from=builder /src/target/release/wordcount-rs /usr/local/bin/wordcount-rs
RUN rm -rf /functions/wordcount-rs/src /functions/wordcount-rs/Cargo.toml \
 && printf '%s\n' '# The Rust example, built into the image.' 'type = "wordcount"' \
      'command = ["/usr/local/bin/wordcount-rs"]' 'timeout = 10' > /functions/wordcount-rs/function.toml
USER 10001:10001
WORKDIR /functions
ENV ASYNCFLOW_LOG_FORMAT=json
ENTRYPOINT ["/usr/local/bin/asyncflow"]
CMD ["worker", "--functions", "/functions"]
