# billsync's image, built from source: docker build -t billsync .
# (Needs the network for the Go image and the modules. Release tools that
# build the binary themselves use Dockerfile.release; the final stage below
# is the same as that file's, a test keeps them equal.)
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# A static binary: no libc, so it runs FROM scratch. -tags release leaves
# the workshop out (demo, mock, bench: fake providers, scratch databases).
RUN CGO_ENABLED=0 go build -tags release -trimpath -ldflags="-s -w" -o /out/billsync ./cmd/billsync

FROM scratch
COPY --from=build /out/billsync /billsync
# --- the same from here as Dockerfile.release ---
# No OS: no shell, no package manager, no /etc/ssl (the binary carries its
# CA roots: golang.org/x/crypto/x509roots/fallback). A numeric non-root
# user, so runAsNonRoot can check it without an /etc/passwd.
USER 65532:65532
ENV BILLSYNC_ADDR=0.0.0.0:8080
EXPOSE 8080
# For orchestrators without HTTP probes; Kubernetes uses /readyz itself.
HEALTHCHECK --interval=30s --timeout=10s CMD ["/billsync", "healthcheck"]
ENTRYPOINT ["/billsync"]
CMD ["serve"]
