# syntax=docker/dockerfile:1
# One image for every holdline service; each container picks its service with its command:
#   docker build -t holdline .
#   docker run --rm -p 8080:8080 -e NATS_URL=nats://nats:4222 -e INTERACTION_SURFACE_HOST=0.0.0.0 \
#     -e HOLDLINE_TENANT_API_KEYS=acme:<key> holdline python -m services.interaction_surface
# (off loopback the surface refuses to start without a tenant credential: docs/guides/deploy.md)
# deploy/k8s runs it as user 10001 with a read-only root filesystem (writable: /tmp and
# /var/lib/holdline, the working directory).

# The base image is pinned by digest (a tag can move): python 3.11.10, slim, Debian bookworm.
# To move it, take the new digest of the official image (docker buildx imagetools inspect
# python:3.11-slim) and set PYTHON_IMAGE (both stages use it).
ARG PYTHON_IMAGE=python:3.11.10-slim-bookworm@sha256:5148c0e4bbb64271bca1d3322360ebf4bfb7564507ae32dd639322e4952a6b16

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/holdline
WORKDIR /src
# The runtime dependencies only (the server extra), every file checked against the sha256 of
# requirements/server.txt (python -m devtools.lock); then the project without dependencies.
COPY requirements ./requirements
RUN /opt/holdline/bin/pip install --require-hashes --no-deps -r requirements/no-deps.txt \
    && /opt/holdline/bin/pip install --require-hashes --no-deps -r requirements/server.txt
COPY pyproject.toml README.md ./
COPY libs ./libs
COPY services ./services
COPY holdline ./holdline
# The demo (its sandbox provider runs in the dev overlay); production runs without it.
COPY demo ./demo
RUN /opt/holdline/bin/pip install --no-deps --no-build-isolation .

FROM ${PYTHON_IMAGE}
# espeak-ng: the text-to-speech engine of the voice channel.
RUN apt-get update \
    && apt-get install -y --no-install-recommends espeak-ng \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 holdline \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
        --home-dir /var/lib/holdline --shell /usr/sbin/nologin holdline \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/holdline
COPY --from=build /opt/holdline /opt/holdline
ENV PATH=/opt/holdline/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/var/lib/holdline
WORKDIR /var/lib/holdline
USER 10001:10001
EXPOSE 8080 8090 8091 8092 8093
CMD ["python", "-m", "services.interaction_surface"]
