# The Lockstep operator image: one static binary on a minimal, non-root base.
#
# NOTE: this Dockerfile cannot be built on the development machines of this
# repository (there is no container engine there). `tools/images/build.sh lockstep`
# builds the equivalent image there (same static binary, empty base with CA
# certificates and the nonroot user) as ghcr.io/lockstep-dev/operator:0.1.0 and
# `tools/images/load.sh lockstep` loads it into the local cluster's real node.
#
#   docker build -t ghcr.io/lockstep-dev/operator:0.1.0 .
#   kubectl apply --server-side -k examples/deploy
#
# Build: a static binary on the gnu target (glibc linked statically with
# `-C target-feature=+crt-static`; rustls, no OpenSSL). This is what
# tools/images/build.sh (image `lockstep`) builds without a container engine,
# so the image the local cluster runs and this one hold the same binary.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY tests ./tests
# A member of the workspace (Cargo.toml): cargo loads its manifest even to build lockstep.
COPY examples/canary ./examples/canary
ENV RUSTFLAGS="-C target-feature=+crt-static"
RUN cargo build --locked --release --bin lockstep --target x86_64-unknown-linux-gnu \
 && install -D -m 0755 target/x86_64-unknown-linux-gnu/release/lockstep /out/lockstep

# Run: distroless static (CA certificates, /etc/passwd with nonroot 65532, nothing else).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/lockstep /lockstep
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/lockstep"]
CMD ["run", "--leader-election"]
