# The board's image: gua-board serve as an unprivileged user, with a health check.
# Build: docker build -t gua-board .   Run it with docker-compose.yml (PostgreSQL beside it).
FROM python:3.11-slim

# No .pyc files written at run time (the code is read-only to the user), logs unbuffered.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    GUA_BOARD_DATA_DIR=/var/lib/gua-board

WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY board ./board
COPY agent ./agent
COPY migrations ./migrations
RUN pip install --no-cache-dir -e '.[board]' \
    && useradd --system --uid 10001 --home-dir /var/lib/gua-board --shell /usr/sbin/nologin gua \
    && mkdir -p /var/lib/gua-board \
    && chown gua:gua /var/lib/gua-board

USER gua
VOLUME ["/var/lib/gua-board"]
EXPOSE 8000

# /healthz answers 200 once the app started (migrations applied, database reachable at
# start). Python's urllib: the slim image has no curl.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status == 200 else 1)"]

CMD ["gua-board", "serve", "--host", "0.0.0.0", "--port", "8000", "--workers", "2"]
