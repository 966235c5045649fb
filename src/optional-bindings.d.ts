/**
 * Bindings slidegate uses when they are present, which wrangler.toml leaves out by default
 * (merged into the Env that `npm run types` generates).
 */
interface Env {
  /** secret: turns on the admin API under /__slidegate/ */
  ADMIN_TOKEN?: string;
  /** [[analytics_engine_datasets]] binding: a data point per decision, refusals as counted summaries */
  SLIDEGATE_METRICS?: AnalyticsEngineDataset;
}
