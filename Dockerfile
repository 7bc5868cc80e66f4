# The host image: `capstan` as the entrypoint (the Helm chart passes only arguments), non-root,
# nothing else in it. Build from the repository root:
#
#   docker build -t registry.example/capstan:0.1.0 .
#
# The runtime needs no files of its own: providers come from ConfigMaps, and the compiled-component
# cache lives in the emptyDir the chart mounts at --cache-dir.
FROM docker.io/library/rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p capstan \
 && install -D -m 0755 target/release/capstan /out/capstan

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/capstan /capstan
USER 65532:65532
ENTRYPOINT ["/capstan"]
