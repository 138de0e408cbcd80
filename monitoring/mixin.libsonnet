// seatflow-reconciler monitoring mixin: Prometheus alerts and Grafana
// dashboards from one source, configured by `_config` (config.libsonnet).
//
//   local reconciler = (import 'mixin.libsonnet') + { _config+:: { ... } };
//   reconciler.prometheusAlerts    // a rule file: {groups: [...]}
//   reconciler.grafanaDashboards   // {'<file>.json': dashboard}
(import 'config.libsonnet') +
(import 'alerts.libsonnet') +
(import 'dashboards.libsonnet')
