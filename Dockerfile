# viewmux: a static binary on an empty base image, run as a non-root user,
# with CA certificates for https upstreams. No shell and no Node: for stdio
# upstreams started with npx, use Dockerfile.node.
#
#   make image        # or: podman build -t ghcr.io/viewmux/viewmux:$(git describe --tags --always) .
#   podman run --rm ghcr.io/viewmux/viewmux:TAG --version
#   podman run --rm -p 8931:8931 -v ./viewmux.toml:/etc/viewmux/viewmux.toml:ro ghcr.io/viewmux/viewmux:TAG
#
# The config must listen on 0.0.0.0 to be reachable from outside the
# container, and then needs [[auth.tokens]] (see docs/security.md).
# cmd/viewmux/image_test.go runs this file's go build line and checks the
# binary is static; keep the line the same in Dockerfile.node.

FROM docker.io/library/golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
ARG COMMIT=
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.linkVersion=${VERSION} -X main.linkCommit=${COMMIT}" -o /out/viewmux ./cmd/viewmux
# The empty image has no user database and no /tmp: make them here.
RUN mkdir -p /out/etc /out/home/viewmux /out/tmp && chmod 1777 /out/tmp \
 && echo 'viewmux:x:10001:10001:viewmux:/home/viewmux:/sbin/nologin' > /out/etc/passwd \
 && echo 'viewmux:x:10001:' > /out/etc/group

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/etc/passwd /out/etc/group /etc/
COPY --from=build /out/tmp /tmp
COPY --from=build --chown=10001:10001 /out/home/viewmux /home/viewmux
COPY --from=build /out/viewmux /usr/local/bin/viewmux
USER 10001:10001
ENV HOME=/home/viewmux
EXPOSE 8931
ENTRYPOINT ["/usr/local/bin/viewmux"]
CMD ["serve", "--config", "/etc/viewmux/viewmux.toml"]
