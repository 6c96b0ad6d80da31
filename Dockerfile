# Builds the selftaint node agent. cgo stays on: the GPU probe (go-nvml)
# loads libnvidia-ml with dlopen, so the binary links against glibc and runs
# on a glibc image.
FROM golang:1.25-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# docker build --build-arg VERSION=$(git describe --tags --always --dirty) \
#   --build-arg REVISION=$(git rev-parse HEAD) .   (as `make build` stamps them)
# -Ttext-segment=0x401000: the same link flags as SELFTAINT_LDFLAGS in the
# Makefile, which says why (resident memory on Linux >= 6.18).
ARG VERSION=
ARG REVISION=
RUN CGO_ENABLED=1 go build -trimpath -ldflags "-s -w -extldflags=-Wl,-Ttext-segment=0x401000 -X main.version=${VERSION} -X main.revision=${REVISION}" -o /out/selftaint ./cmd/selftaint

# distroless base: glibc, CA certificates, nothing else; runs as uid 65532.
# The binary is owned by the agent's user, read-only (0555; the manifests
# also mount the root filesystem read-only): the kernel pages a file out of a
# process's memory with madvise(MADV_PAGEOUT) only for the file's owner, and
# --shed-startup-memory relies on it (README, Memory).
FROM gcr.io/distroless/base-debian12:nonroot
COPY --from=build --chown=65532:65532 --chmod=0555 /out/selftaint /usr/local/bin/selftaint
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/selftaint"]
CMD ["agent", "--host-root=/host", "--config=/etc/selftaint/config.yaml"]
