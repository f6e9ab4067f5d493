# vmpooler in a container: `docker build -t vmpooler .`, then
#   docker run -p 127.0.0.1:4567:4567 vmpooler              # `run`: API + manager, embedded Redis
#   docker run ... vmpooler api | manager | check-config     # as vmpooler's image does
#
# Two stages: the first builds vmpooler's wheel and its dependencies' wheels and installs them
# into a virtualenv at /opt/vmpooler; the second is the base image plus that virtualenv.
# Where no package index is reachable, put the wheels in ./wheels first, made with a Python of
# the base image's version (3.11 for the default base; any patch level):
#   python3.11 -m pip wheel --wheel-dir wheels '.[image]'
# and the build uses only them.
# BASE_IMAGE needs python3 (3.11 or newer) with its venv module; any Debian-like image does.
ARG BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY . .
RUN python3 -m venv /opt/build \
 && if ! ls wheels/vmpooler-*.whl >/dev/null 2>&1; then \
      /opt/build/bin/pip wheel --wheel-dir wheels '.[image]' ; \
    fi \
 && python3 -m venv --without-pip /opt/vmpooler \
 && if ! /opt/build/bin/pip --python /opt/vmpooler/bin/python install --no-index \
      --find-links wheels 'vmpooler[image]' ; then \
      echo "vmpooler: ./wheels lacks a wheel this image's $(python3 -V) needs: make the wheels" \
           "with a Python of that version (python3.X -m pip wheel --wheel-dir wheels '.[image]')" \
           "or remove ./wheels to build from the package index" >&2 ; \
      exit 1 ; \
    fi \
 && /opt/vmpooler/bin/vmpooler --version \
 && mkdir -p /var/lib/vmpooler /etc/vmpooler/base /etc/vmpooler/config

FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="vmpooler" \
      org.opencontainers.image.description="Pools of ready virtual machines for test infrastructure (vmpooler API v3)" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/vmpooler /opt/vmpooler
COPY --from=build --chown=1001:1001 /var/lib/vmpooler /var/lib/vmpooler
# Mount points for a configuration (the Helm chart mounts vmpooler.yaml in /etc/vmpooler/base
# and pools.yaml in /etc/vmpooler/config), there already for a read-only root filesystem.
COPY --from=build /etc/vmpooler /etc/vmpooler
# In a container the API and the manager's probes listen on every address (outside, the
# default stays 127.0.0.1 and the manager serves nothing). The working directory is the one
# writable place besides /tmp: the embedded Redis keeps ./var/redis there. To move the port,
# set PORT and VMPOOLER_MANAGER_BIND (HOST:PORT) together: the health check follows PORT.
ENV PATH=/opt/vmpooler/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    PORT=4567 \
    VMPOOLER_BIND=0.0.0.0 \
    VMPOOLER_MANAGER_BIND=0.0.0.0:4567
WORKDIR /var/lib/vmpooler
VOLUME /var/lib/vmpooler
USER 1001:1001
EXPOSE 4567
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python3", "-c", "import os, sys, urllib.request as r; sys.exit(r.urlopen('http://127.0.0.1:%s/healthcheck' % os.environ.get('PORT', '4567'), timeout=4).status != 200)"]
ENTRYPOINT ["vmpooler"]
CMD ["run"]
