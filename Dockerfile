# The host image for people with Docker: the same image `make image` builds without one (the same
# root filesystem, laid out by image/rootfs.sh from the same Debian packages; the same user,
# entrypoint and environment, which a test compares with the image `make image` writes). `capstan`
# is the entrypoint (the Helm chart passes only arguments), it runs as 65532:65532, and it needs no
# writable path of its own: providers come from ConfigMaps, and the compiled-component cache lives
# in the emptyDir the chart mounts at --cache-dir. Build from the repository root:
#
#   docker build -t registry.example/capstan:0.1.0 .
FROM docker.io/library/rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p capstan \
 && apt-get update \
 && bash image/rootfs.sh /rootfs target/release/capstan

FROM scratch
COPY --from=build /rootfs /
USER 65532:65532
WORKDIR /
ENV PATH=/usr/local/bin:/usr/bin:/bin SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
ENTRYPOINT ["/capstan"]
