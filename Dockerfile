# kvidx image built only from Debian 12 packages (the same list scripts/lib.sh installs).
FROM debian:12-slim AS build
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config ccache libnats-dev nlohmann-json3-dev libboost-dev \
      libspdlog-dev libfmt-dev doctest-dev libcli11-dev libxxhash-dev libbenchmark-dev zlib1g-dev libisal-dev \
      libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libssl-dev openssl \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVIDX_WERROR=OFF \
    && cmake --build /build --target kvidx

FROM debian:12-slim
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libnats3.4 libspdlog1.10 libfmt9 libxxhash0 zlib1g libisal2 libzmq5 ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /build/bin/kvidx /usr/local/bin/kvidx
USER nobody
ENTRYPOINT ["/usr/local/bin/kvidx"]
CMD ["serve", "--config", "/etc/kvidx/kvidx.toml"]
