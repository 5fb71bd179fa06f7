# One image for the API, the worker and the one-shot migration (docker-compose.yml picks the command).
# Build stage: all dependencies, `npm run build` (tsc → dist/, plus migrations/ and public/).
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY scripts ./scripts
COPY migrations ./migrations
COPY public ./public
RUN npm run build

# Runtime stage: the compiled JavaScript and the production dependencies only. No tsx, no
# TypeScript, and no embedded PostgreSQL (an optional dependency: only `npm start` without
# DATABASE_URL uses it; here DATABASE_URL always names a server).
FROM node:20-bookworm-slim
WORKDIR /app
ENV NODE_ENV=production
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --omit=optional --no-audit --no-fund && npm cache clean --force
COPY --from=build /app/dist ./dist
USER node
EXPOSE 3000 9465
# node itself is PID 1 (never `npm run …`: npm passes no SIGTERM on, so `docker stop` would end in
# a SIGKILL with messages in flight). Node drains on SIGTERM; the compose file adds `init: true`
# so an init reaps zombies and forwards the signal.
CMD ["node", "dist/src/commands/api.js"]
