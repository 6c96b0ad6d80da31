# Builds the selftaint node agent. cgo stays on: the GPU probe (go-nvml)
# loads libnvidia-ml with dlopen, so the binary links against glibc and runs
# on a glibc image.
FROM golang:1.25-bookworm AS build
# libsystemd-dev: <systemd/sd-journal.h>, which go-systemd's sdjournal (the
# journald log monitor) compiles against; it loads libsystemd.so.0 with
# dlopen at run time, so the binary does not link against it.
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libsystemd-dev \
	&& rm -rf /var/lib/apt/lists/*
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
# libsystemd.so.0 and what it needs beyond glibc (libcap, libgcrypt,
# libgpg-error, liblzma, libzstd, liblz4; about 3.4 MiB), which distroless
# lacks, staged for the runtime image's multiarch library directory, where
# the dynamic loader looks without an ld.so.cache entry.
RUN set -eu; arch=$(gcc -dumpmachine); dir=/out/syslib/usr/lib/$arch; mkdir -p "$dir"; \
	lib=/usr/lib/$arch/libsystemd.so.0; \
	for dep in $(ldd "$lib" | awk '$3 ~ /^\// {print $3}' | grep -v -e '/libc\.so' -e '/ld-linux'); do cp -L "$dep" "$dir/"; done; \
	cp -L "$lib" "$dir/"

# distroless base: glibc, CA certificates, nothing else; runs as uid 65532.
# The binary is owned by the agent's user, read-only (0555; the manifests
# also mount the root filesystem read-only): the kernel pages a file out of a
# process's memory with madvise(MADV_PAGEOUT) only for the file's owner, and
# --shed-startup-memory relies on it (README, Memory).
FROM gcr.io/distroless/base-debian12:nonroot
COPY --from=build /out/syslib/ /
COPY --from=build --chown=65532:65532 --chmod=0555 /out/selftaint /usr/local/bin/selftaint
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/selftaint"]
CMD ["agent", "--host-root=/host", "--config=/etc/selftaint/config.yaml"]
