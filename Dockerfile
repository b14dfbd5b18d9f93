# mcpmux: a static binary on an empty base image, run as a non-root user,
# with CA certificates for https upstreams. No shell and no Node: for stdio
# upstreams started with npx, use Dockerfile.node.
#
#   make image        # or: podman build -t ghcr.io/mcpmux/mcpmux:$(git describe --tags --always) .
#   podman run --rm ghcr.io/mcpmux/mcpmux:TAG --version
#   podman run --rm -p 8931:8931 -v ./mcpmux.toml:/etc/mcpmux/mcpmux.toml:ro ghcr.io/mcpmux/mcpmux:TAG
#
# The config must listen on 0.0.0.0 to be reachable from outside the
# container, and then needs [[auth.tokens]] (see docs/security.md).
# cmd/mcpmux/image_test.go runs this file's go build line and checks the
# binary is static; keep the line the same in Dockerfile.node.

FROM docker.io/library/golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
ARG COMMIT=
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.linkVersion=${VERSION} -X main.linkCommit=${COMMIT}" -o /out/mcpmux ./cmd/mcpmux
# The empty image has no user database and no /tmp: make them here.
RUN mkdir -p /out/etc /out/home/mcpmux /out/tmp && chmod 1777 /out/tmp \
 && echo 'mcpmux:x:10001:10001:mcpmux:/home/mcpmux:/sbin/nologin' > /out/etc/passwd \
 && echo 'mcpmux:x:10001:' > /out/etc/group

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/etc/passwd /out/etc/group /etc/
COPY --from=build /out/tmp /tmp
COPY --from=build --chown=10001:10001 /out/home/mcpmux /home/mcpmux
COPY --from=build /out/mcpmux /usr/local/bin/mcpmux
USER 10001:10001
ENV HOME=/home/mcpmux
EXPOSE 8931
ENTRYPOINT ["/usr/local/bin/mcpmux"]
CMD ["serve", "--config", "/etc/mcpmux/mcpmux.toml"]
