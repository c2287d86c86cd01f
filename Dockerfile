# syntax=docker/dockerfile:1
# One image for every holdline service; each container picks its service with its command:
#   docker build -t holdline .
#   docker run --rm -p 8080:8080 -e NATS_URL=nats://nats:4222 -e INTERACTION_SURFACE_HOST=0.0.0.0 \
#     -e HOLDLINE_TENANT_API_KEYS=acme:<key> holdline python -m services.interaction_surface
# (off loopback the surface refuses to start without a tenant credential: docs/guides/deploy.md)
# deploy/k8s runs it as user 10001 with a read-only root filesystem (writable: /tmp and
# /var/lib/holdline, the working directory).

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/holdline
WORKDIR /src
COPY pyproject.toml README.md ./
COPY libs ./libs
COPY services ./services
COPY holdline ./holdline
# The demo (its sandbox provider runs in the dev overlay); production runs without it.
COPY demo ./demo
# The runtime dependencies only (the server extra): no [dev] extra, no editable install.
RUN /opt/holdline/bin/pip install '.[server]'

FROM python:3.11-slim
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
