import { defineConfig } from 'drizzle-kit';

// drizzle-kit generates the migrations in migrations/ from src/db/schema/. What it cannot
// express (btree_gist, EXCLUDE) is a custom migration: `npx drizzle-kit generate --custom --name=…`.
// Each writes its snapshot to migrations/meta/ too: commit it with the SQL, or the next `generate`
// diffs against a stale one (docs/operating.md, "Changing the schema"; test/integration/db/schema-drift.test.ts).
export default defineConfig({
  dialect: 'postgresql',
  schema: './src/db/schema/',
  out: './migrations',
});
