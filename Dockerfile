# The Lockstep operator image: one static binary on a minimal, non-root base.
#
# NOTE: this image cannot be built on the development machines of this repository
# (there is no container engine there); it is kept deliberately simple and is not
# exercised by `make test`. The same binary is tested directly by `make e2e`.
#
#   docker build -t lockstep:0.1.0 .
#   kubectl apply --server-side -k examples/deploy
#
# Build: a static musl binary (rustls, no OpenSSL, no libc at run time).
FROM rust:1-bookworm AS build
RUN rustup target add x86_64-unknown-linux-musl \
 && apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY tests ./tests
RUN cargo build --locked --release --bin lockstep --target x86_64-unknown-linux-musl \
 && install -D -m 0755 target/x86_64-unknown-linux-musl/release/lockstep /out/lockstep

# Run: distroless static (CA certificates, /etc/passwd with nonroot 65532, nothing else).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/lockstep /lockstep
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/lockstep"]
CMD ["run", "--leader-election"]
