// Types of `sluice/vite` (vite.js). They name nothing of Vite's: a package installed from a
// folder cannot resolve the app's `vite` types from where it lies, so the plugin is typed by
// what Vite's `PluginOption` needs of it.

export interface SluiceViteOptions {
  /**
   * Where, under the app's base URL, the worker files are served in `vite dev` and written in
   * the build; the worker script's `packageUrl` names the same folder. Default `'/sluice/'`.
   */
  base?: string;
}

/** A Vite plugin: goes into `plugins` in vite.config.ts. */
export interface SluiceVitePlugin {
  name: string;
}

/**
 * Serves Sluice's worker files unchanged under `base` in `vite dev`, emits them unchanged in
 * the build, and lets Vite serve the page client's wasm (its allow list and dependency
 * pre-bundling).
 */
export default function sluice(options?: SluiceViteOptions): SluiceVitePlugin;
