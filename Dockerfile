FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY board ./board
COPY agent ./agent
COPY migrations ./migrations
RUN pip install --no-cache-dir -e '.[board]'
ENV GUA_BOARD_DATA_DIR=/var/lib/gua-board
EXPOSE 8000
CMD ["gua-board", "serve", "--host", "0.0.0.0", "--port", "8000", "--workers", "2"]
