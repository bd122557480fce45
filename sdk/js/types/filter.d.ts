// Generated from wit/plugin.wit by sdk/js/bin/types.mjs; do not edit.
/// <reference path="./interfaces/sluice-plugin-filter-api.d.ts" />
/// <reference path="./interfaces/sluice-plugin-host.d.ts" />
/// <reference path="./interfaces/sluice-plugin-types.d.ts" />
declare module 'sluice:plugin/filter@0.2.0' {
  export type * as SluicePluginHost020 from 'sluice:plugin/host@0.2.0'; // import sluice:plugin/host@0.2.0
  export type * as SluicePluginTypes020 from 'sluice:plugin/types@0.2.0'; // import sluice:plugin/types@0.2.0
  export * as filterApi from 'sluice:plugin/filter-api@0.2.0'; // export sluice:plugin/filter-api@0.2.0
}
