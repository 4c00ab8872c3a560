# syntax=docker/dockerfile:1
# Build a wheel on the same Debian and Python as the runtime, then run on distroless, non-root.
FROM debian:13-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-pip \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN python3 -m venv /venv \
 && /venv/bin/pip install --no-cache-dir --upgrade pip \
 && /venv/bin/pip install --no-cache-dir .

FROM gcr.io/distroless/python3-debian13:nonroot
COPY --from=build /venv /venv
ENV PATH=/venv/bin:$PATH
EXPOSE 9443
USER nonroot:nonroot
ENTRYPOINT ["/venv/bin/function"]
