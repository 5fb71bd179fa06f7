# One image for the API, the worker and the one-shot migration (docker-compose.yml picks the command).
FROM node:20-bookworm-slim
WORKDIR /app
ENV NODE_ENV=production
COPY package.json package-lock.json ./
# Dev dependencies stay: the services run TypeScript through tsx, and drizzle-kit is handy in a shell.
RUN npm ci --no-audit --no-fund && npm cache clean --force
COPY . .
USER node
EXPOSE 3000 9465
CMD ["npm", "run", "api"]
