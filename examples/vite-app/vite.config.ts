import { defineConfig } from 'vite';
import sluice from 'sluice/vite';

export default defineConfig({
  // Serves Sluice's worker files under /sluice/ in `vite dev` (public/sw.js loads them from
  // there), writes them unchanged into the build, and lets Vite serve the page client's wasm
  // from the installed package (a folder outside this project when installed with `file:`).
  plugins: [sluice({ base: '/sluice/' })],
});
