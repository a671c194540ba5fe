# smartfeeds, built from this checkout. Used by docker-compose.yml.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --bin smartfeeds

FROM debian:bookworm-slim
COPY --from=build /src/target/release/smartfeeds /usr/local/bin/smartfeeds
RUN useradd --system --home /var/lib/smartfeeds --create-home smartfeeds
USER smartfeeds
WORKDIR /var/lib/smartfeeds
ENTRYPOINT ["smartfeeds"]
CMD ["--config", "/etc/smartfeeds/smartfeeds.toml"]
