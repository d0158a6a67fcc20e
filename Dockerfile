# The host in a container, with bubblewrap, Python and Bun for the jails. NOT built in CI (there
# is no Docker engine where this was written): see the README's Packaging section, which also
# says what the container needs to run jails.
#
#   docker build -t host --build-arg COMMIT=$(git rev-parse HEAD) .
#   docker run -d --name host --privileged --stop-timeout 60 \
#     -v host-data:/data -v host-secrets:/secrets -v "$PWD/functions:/functions:ro" -p 4222:4222 host

# Cross-compiled on the build machine's platform for the image's (buildx sets TARGETARCH).
FROM --platform=$BUILDPLATFORM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH
# The context has no .git (.dockerignore), so the commit comes in as build arguments, the way
# scripts/release stamps it; empty ones leave "unknown" in `host version`.
ARG VERSION=""
ARG COMMIT=""
ARG COMMIT_TIME=""
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.ldVersion=$VERSION -X main.ldCommit=$COMMIT -X main.ldCommitTime=$COMMIT_TIME" \
      -o /out/host ./cmd/host

# Bun from npm, the way scripts/setup installs it (same version); only its binary is kept.
FROM node:22-bookworm-slim AS bun
RUN npm install -g --silent bun@1.4.4 && /usr/local/lib/node_modules/bun/bin/bun.exe --version

FROM debian:bookworm-slim
# bubblewrap: the jail; python3: .py functions; ca-certificates: HTTPS for functions (through
# the egress proxy), S3 and package installs. The jail sees /usr only, so every runtime lives
# there (/usr/local/bin/bun included).
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap python3 ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=bun /usr/local/lib/node_modules/bun/bin/bun.exe /usr/local/bin/bun
RUN ln -s bun /usr/local/bin/bunx && bun --version
COPY --from=build /out/host /usr/local/bin/host
COPY packaging/docker-entrypoint /usr/local/bin/docker-entrypoint
COPY functions /functions
# The jail's user: the host runs as root (to start bwrap as this user and chown job files to it)
# and the jobs run as 10001, a uid nothing else in the image uses. /data must let it pass
# (0711); the secrets key lives apart from the data, in /secrets (0700).
RUN groupadd --system --gid 10001 jail \
 && useradd --system --uid 10001 --gid jail --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin jail \
 && install -d -m 0711 /data \
 && install -d -m 0700 /secrets
VOLUME ["/data", "/secrets"]
# 4222: NATS clients, with authorization (--nats-auth: the users and passwords are in
# /data/nats-auth.json). 8080: HTTP, bound to loopback here, so not reachable through a
# published port; the dashboard and POST /run need the token in /secrets/http.token (made at
# first start). To publish it, add --http 0.0.0.0:8080; for webhooks only, put a reverse proxy
# in the container's network namespace that forwards only /hooks/.
EXPOSE 4222 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s \
  CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"]
# Arguments after the image name are appended: docker run ... host --hook github=hmac:gh-key
ENTRYPOINT ["docker-entrypoint", "host", "serve", "--data", "/data", "--functions", "/functions", "--secrets-key-file", "/secrets/secrets.key", "--http", "127.0.0.1:8080", "--http-token-file", "/secrets/http.token", "--nats-listen", "0.0.0.0:4222", "--nats-auth", "--jail-uid", "10001", "--jail-gid", "10001"]
