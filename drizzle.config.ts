import { defineConfig } from 'drizzle-kit';

// drizzle-kit generates the migrations in migrations/ from src/db/schema.ts. What it cannot
// express (btree_gist, EXCLUDE) is a custom migration: `npx drizzle-kit generate --custom --name=…`.
export default defineConfig({
  dialect: 'postgresql',
  schema: './src/db/schema.ts',
  out: './migrations',
});
