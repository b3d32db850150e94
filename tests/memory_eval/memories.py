"""The labelled memory set of tests/memory_quality.rs, written for skillhost: one user (Lin,
a developer in Shanghai who works in English and Chinese), five projects over about eight
months, half the memories in English and half in Chinese. `python3 tests/memory_eval/memories.py`
writes memories.jsonl; queries live in queries.py.

Each memory: key, day (since the first one), kind, priority, content. `supersedes` names the
memory an update replaces (the newest of a chain is the live fact)."""
import json, os

M = []
def m(key, day, kind, content, priority=3, supersedes=None):
    M.append(dict(key=key, day=day, kind=kind, priority=priority, content=content, supersedes=supersedes))

# --- the user: preferences and personal facts (English) ---
m("pref-indent", 3, "preference", "Lin prefers tabs over spaces in Go and Python code.", 4)
m("pref-indent-2", 140, "preference", "Lin now prefers four spaces instead of tabs for Python code.", 4, "pref-indent")
m("pref-commit", 5, "preference", "Commit messages should be in the imperative mood, under 72 characters.", 4)
m("pref-answers", 6, "preference", "Lin wants short answers first, details only when asked.", 4)
m("pref-tz", 2, "preference", "Lin's timezone is Asia/Shanghai (UTC+8).", 4)
m("pref-editor", 9, "preference", "Lin edits code in Neovim with the LazyVim distribution.", 3)
m("pref-editor-2", 170, "preference", "Lin switched editors from Neovim to Zed in the autumn.", 3, "pref-editor")
m("pref-pkg", 12, "preference", "Use npm as the JavaScript package manager in every repo.", 3)
m("pref-pkg-2", 95, "preference", "Use pnpm rather than npm for JavaScript packages from now on.", 3, "pref-pkg")
m("pref-review", 20, "preference", "Lin reviews pull requests in the morning, before standup.", 2)
m("pref-coffee", 30, "general", "Lin drinks oat-milk flat whites; the team orders from Manner Coffee.", 1)
m("pref-meetings", 33, "preference", "No meetings on Wednesday afternoons: that is focus time.", 3)
m("pref-tests", 40, "preference", "Every bug fix needs a regression test in the same pull request.", 4)
m("pref-dates", 41, "preference", "Write dates as ISO 8601 (2024-03-05), never as 03/05.", 3)
m("pref-shell", 44, "preference", "Lin's login shell is fish; scripts in repos stay POSIX sh.", 2)
m("pref-lang-docs", 50, "preference", "Design documents are written in English; chat with the Chinese team is in Chinese.", 3)
m("pref-city", 1, "fact", "Lin lives in Shanghai, in the Xuhui district.", 3)
m("pref-city-2", 200, "fact", "Lin moved from Shanghai to Hangzhou in the summer.", 3, "pref-city")
m("pref-laptop", 15, "fact", "Lin's work laptop is a MacBook Pro with an M3 chip and 36 GB of memory.", 2)
m("pref-holiday", 120, "general", "Lin is on holiday during the Golden Week, 1 to 7 October.", 2)
m("pref-bike", 60, "general", "Lin cycles to the office when the weather is dry.", 1)
m("pref-font", 70, "preference", "Terminal font: JetBrains Mono at 14 points.", 1)
m("pref-notif", 75, "preference", "Send reminders by email, not by phone notification.", 2)
m("pref-manager", 8, "fact", "Lin's manager is Sarah Chen, the head of platform engineering.", 3)
m("pref-manager-2", 150, "fact", "Lin's manager is now David Okafor; Sarah Chen moved to the data team.", 3, "pref-manager")

# --- the user (Chinese) ---
m("zh-pref-reply", 4, "preference", "回答问题时先给结论，再给理由，不要长篇大论。", 4)
m("zh-pref-name", 7, "preference", "在中文文档里，林的名字写作“林晓”，不要写拼音。", 3)
m("zh-pref-lunch", 25, "general", "林中午一般在公司楼下的面馆吃饭，不吃香菜。", 1)
m("zh-pref-weekly", 28, "preference", "每周五下午写周报，发到团队的飞书群里。", 3)
m("zh-pref-music", 35, "general", "写代码的时候喜欢听轻音乐或者白噪音。", 1)
m("zh-pref-sleep", 36, "general", "林晚上十一点以后不看工作消息。", 2)
m("zh-pref-tea", 45, "general", "林下午喜欢喝龙井茶，不加糖。", 1)
m("zh-pref-sport", 48, "general", "林周末会去打羽毛球，一般在周六上午。", 1)
m("zh-pref-read", 55, "general", "林最近在读《人月神话》，每天睡前读二十页。", 1)
m("zh-pref-car", 65, "fact", "林没有车，上班坐地铁九号线。", 2)
m("zh-pref-car-2", 210, "fact", "搬到杭州以后，林坐地铁一号线上班。", 2, "zh-pref-car")
m("zh-pref-review", 80, "preference", "代码评审意见要具体，指出行号和改法，不要只说“不好”。", 4)
m("zh-pref-emoji", 85, "preference", "正式邮件里不要用表情符号。", 2)
m("zh-pref-phone", 90, "fact", "林的工作手机号码以 139 开头，只在紧急情况下打电话。", 2)
m("zh-pref-lang", 100, "preference", "和林聊天时用中文，代码注释用英文。", 4)
m("zh-pref-mentor", 110, "fact", "林是新同事王芳的导师，每两周和她一对一交流一次。", 3)
m("zh-pref-mentor-2", 180, "fact", "林现在是新同事赵磊的导师，王芳已经转正。", 3, "zh-pref-mentor")
m("zh-pref-office", 115, "fact", "林的工位在十二楼靠窗的位置，编号 12-07。", 1)
m("zh-pref-allergy", 18, "fact", "林对花生过敏，团队聚餐要避开含花生的菜。", 4)
m("zh-pref-birthday", 22, "fact", "林的生日是五月二十日。", 2)
m("zh-pref-training", 130, "general", "林报名了公司的 Rust 进阶培训，每周四晚上上课。", 2)
m("zh-pref-screen", 135, "preference", "林习惯用两块显示器，左边放代码，右边放文档。", 1)
m("zh-pref-wfh", 160, "preference", "林每周二和周四在家办公。", 3)
m("zh-pref-wfh-2", 230, "preference", "林现在只在周五在家办公，其余时间都去办公室。", 3, "zh-pref-wfh")

# --- project billing-api (English): Go service, invoices and payments ---
P = "billing-api"
m("bill-lang", 10, "fact", f"{P} is written in Go 1.22 and built with Bazel.")
m("bill-db", 11, "fact", f"{P} stores invoices in PostgreSQL 15 on a managed RDS instance.")
m("bill-owner", 12, "fact", f"The on-call owner of {P} is Marcus Webb.")
m("bill-deploy", 14, "fact", f"{P} deploys through Argo CD; production syncs are manual.")
m("bill-port", 16, "fact", f"{P} listens on port 8443 behind the internal load balancer.")
m("bill-timeout", 21, "fact", f"The payment provider client in {P} times out after 10 s.")
m("bill-timeout-2", 125, "fact", f"The payment provider client in {P} now times out after 10 ms per attempt, with retries.", 3, "bill-timeout")
m("bill-pitfall-tz", 26, "pitfall", f"{P} invoices were dated wrongly when the server ran in UTC; always pass the customer's timezone.", 4)
m("bill-pitfall-float", 31, "pitfall", f"Never use float64 for money in {P}; amounts are int64 cents.", 5)
m("bill-queue", 38, "fact", f"{P} publishes invoice events to the Kafka topic billing.invoices.v2.")
m("bill-stripe", 42, "fact", f"{P} talks to Stripe for card payments and to Alipay for Chinese customers.")
m("bill-approvals", 47, "fact", f"Releases of {P} need one approval from the finance team.")
m("bill-approvals-2", 160, "fact", f"Releases of {P} now need two approvals from the finance team.", 3, "bill-approvals")
m("bill-result-load", 52, "task-result", f"Load test of {P}: 1,200 requests per second at p99 180 ms before CPU saturation.")
m("bill-result-leak", 58, "task-result", f"Found the {P} memory leak: an unbounded cache of exchange rates; fixed by a 1-hour TTL.")
m("bill-cron", 63, "fact", f"Monthly invoices in {P} are generated by a cron job at 02:00 on the first day of the month.")
m("bill-secrets", 68, "fact", f"{P} reads its secrets from HashiCorp Vault at startup.")
m("bill-tests", 72, "fact", f"Integration tests of {P} need a local Postgres started with docker compose.")
m("bill-pitfall-migr", 77, "pitfall", f"Database migrations of {P} must be backward compatible: old pods keep running during deploys.", 4)
m("bill-metrics", 82, "fact", f"{P} exports Prometheus metrics on /metrics; the dashboard is 'Billing overview' in Grafana.")
m("bill-currency", 88, "fact", f"{P} supports USD, EUR and CNY; JPY is planned.")
m("bill-refund", 97, "task-result", f"Refunds in {P} took three days because of a stuck worker; the worker now restarts on failure.")
m("bill-slo", 102, "fact", f"The availability target of {P} is 99.95 % per month.")
m("bill-repo", 13, "fact", f"The {P} repository is github.com/acme/billing-api; the main branch is protected.")

# --- project atlas-web (English): React front end ---
P = "atlas-web"
m("atlas-stack", 17, "fact", f"{P} is a React 18 single-page app written in TypeScript, bundled with Vite.")
m("atlas-host", 19, "fact", f"{P} is hosted on Vercel; preview deployments are created for every pull request.")
m("atlas-design", 23, "fact", f"The designer of {P} is Priya Nair; the mockups live in Figma.")
m("atlas-state", 27, "fact", f"{P} keeps server state in TanStack Query and client state in Zustand.")
m("atlas-i18n", 32, "fact", f"{P} is translated with i18next; Chinese strings are in locales/zh-CN.json.")
m("atlas-pitfall-ssr", 37, "pitfall", f"{P} breaks if window is used at import time; guard browser APIs for the prerender step.", 4)
m("atlas-a11y", 43, "fact", f"{P} must meet WCAG 2.1 AA; axe runs in CI on every page.")
m("atlas-result-perf", 49, "task-result", f"Lighthouse score of {P} improved from 62 to 91 after lazy-loading the charts.")
m("atlas-node", 53, "fact", f"{P} builds with Node 18.")
m("atlas-node-2", 150, "fact", f"{P} now builds with Node 22; Node 18 is no longer supported.", 3, "atlas-node")
m("atlas-e2e", 57, "fact", f"End-to-end tests of {P} use Playwright against the staging API.")
m("atlas-pitfall-cache", 61, "pitfall", f"Users of {P} saw stale pages after deploys: the service worker cached index.html; it now uses network-first.", 4)
m("atlas-charts", 66, "fact", f"Charts in {P} are drawn with ECharts because it handles Chinese fonts well.")
m("atlas-auth", 71, "fact", f"{P} signs users in with OAuth through Auth0.")
m("atlas-release", 76, "fact", f"{P} releases every second Tuesday.")
m("atlas-bundle", 83, "task-result", f"The {P} bundle shrank from 1.9 MB to 740 kB after removing moment.js.")
m("atlas-css", 89, "fact", f"{P} styles components with Tailwind CSS; no CSS-in-JS.")
m("atlas-flags", 94, "fact", f"Feature flags in {P} come from LaunchDarkly.")
m("atlas-errors", 99, "fact", f"Front-end errors of {P} are reported to Sentry, project atlas-web-prod.")
m("atlas-browsers", 104, "fact", f"{P} supports the last two versions of Chrome, Safari, Firefox and Edge.")
m("atlas-pm", 108, "fact", f"The product manager of {P} is Tom Becker.")
m("atlas-pm-2", 190, "fact", f"The product manager of {P} is now Elena Rossi; Tom Becker left the company.", 3, "atlas-pm")

# --- project harbor-cli (English): Rust command-line tool ---
P = "harbor-cli"
m("harbor-lang", 24, "fact", f"{P} is a Rust command-line tool that syncs container images between registries.")
m("harbor-msrv", 29, "fact", f"The minimum supported Rust version of {P} is 1.75.")
m("harbor-dist", 34, "fact", f"{P} is distributed through Homebrew and as static musl binaries on GitHub releases.")
m("harbor-pitfall-tls", 39, "pitfall", f"{P} failed against self-signed registries; it needs --ca-file, never --insecure by default.", 4)
m("harbor-config", 46, "fact", f"{P} reads its configuration from ~/.config/harbor/config.toml.")
m("harbor-result-speed", 51, "task-result", f"Parallel layer uploads made {P} sync a 2 GB image in 38 s instead of 2 min 40 s.")
m("harbor-license", 56, "fact", f"{P} is licensed under Apache-2.0.")
m("harbor-ci", 62, "fact", f"{P} runs CI on GitHub Actions for Linux, macOS and Windows.")
m("harbor-pitfall-win", 67, "pitfall", f"On Windows, {P} must not hold files open while renaming them.", 3)
m("harbor-users", 73, "fact", f"{P} has about 400 weekly active users inside the company.")
m("harbor-async", 78, "fact", f"{P} uses tokio and reqwest; no blocking HTTP client.")
m("harbor-maint", 84, "fact", f"The co-maintainer of {P} is Jonas Berg.")
m("harbor-bench", 91, "task-result", f"Benchmark: {P} compresses layers with zstd level 3 at 410 MB/s.")
m("harbor-logs", 96, "fact", f"{P} writes logs with tracing; -v raises the level to debug.")
m("harbor-version", 106, "fact", f"The current release of {P} is 0.9.2.")
m("harbor-version-2", 175, "fact", f"The current release of {P} is 1.0.0, the first stable one.", 3, "harbor-version")

# --- project orion-ml (English): recommendation model ---
P = "orion-ml"
m("orion-what", 54, "fact", f"{P} trains the product recommendation model for the shop.")
m("orion-framework", 59, "fact", f"{P} is trained with PyTorch 2 on four A100 GPUs.")
m("orion-data", 64, "fact", f"Training data of {P} is the last 90 days of click logs from the data lake.")
m("orion-pitfall-leak", 69, "pitfall", f"{P} once leaked future clicks into training; split by time, never randomly.", 5)
m("orion-metric", 74, "fact", f"{P} is judged by recall@20 on a held-out week.")
m("orion-result-ab", 81, "task-result", f"A/B test of {P} v3: click-through rate up 4.2 % over v2.")
m("orion-serve", 86, "fact", f"{P} serves predictions through Triton Inference Server.")
m("orion-schedule", 92, "fact", f"{P} retrains every Sunday night.")
m("orion-schedule-2", 185, "fact", f"{P} now retrains every night instead of once a week.", 3, "orion-schedule")
m("orion-owner", 98, "fact", f"The data scientist on {P} is Aiko Tanaka.")
m("orion-features", 105, "fact", f"{P} uses a feature store built on Feast with Redis online storage.")
m("orion-cost", 112, "task-result", f"Training {P} costs about 350 USD per run on spot instances.")

# --- project pixel-app (English): mobile app ---
P = "pixel-app"
m("pixel-stack", 118, "fact", f"{P} is a Flutter app for iOS and Android.")
m("pixel-store", 122, "fact", f"{P} is published on the App Store and Google Play under the name Pixel Notes.")
m("pixel-pitfall-perm", 127, "pitfall", f"{P} crashed on Android 14 when the photo permission was denied; handle the denial path.", 4)
m("pixel-backend", 132, "fact", f"{P} syncs notes through Firebase Firestore.")
m("pixel-result-crash", 138, "task-result", f"Crash-free sessions of {P} rose from 97.1 % to 99.6 % after the permission fix.")
m("pixel-release", 145, "fact", f"{P} ships a release every four weeks.")

# --- 星河数据平台 (Chinese): data platform ---
P = "星河数据平台"
m("xh-what", 10, "fact", f"{P}负责公司所有业务数据的采集、清洗和报表。")
m("xh-engine", 12, "fact", f"{P}的计算引擎是 Spark 3.4，调度用 Airflow。")
m("xh-storage", 15, "fact", f"{P}的数据存放在 Hive 数仓里，冷数据放在对象存储 OSS。")
m("xh-owner", 18, "fact", f"{P}的负责人是张伟，有问题先找他。")
m("xh-owner-2", 165, "fact", f"{P}的负责人换成了李娜，张伟调去做风控项目了。", 3, "xh-owner")
m("xh-pitfall-skew", 22, "pitfall", f"{P}的日活报表曾因为数据倾斜跑了六个小时，大表关联前要先打散热点键。", 4)
m("xh-sla", 26, "fact", f"{P}的核心报表要求每天早上七点前产出。")
m("xh-sla-2", 140, "fact", f"{P}的核心报表现在要求每天早上六点前产出。", 3, "xh-sla")
m("xh-cluster", 30, "fact", f"{P}的集群有两百台机器，部署在阿里云华东二区。")
m("xh-result-cost", 34, "task-result", f"{P}把小文件合并以后，存储成本每月降低了三万元。")
m("xh-pitfall-null", 39, "pitfall", f"{P}里用户表的手机号字段可能为空，关联时不要用它做主键。", 4)
m("xh-format", 44, "fact", f"{P}的宽表统一使用 Parquet 格式，按天分区。")
m("xh-retention", 49, "fact", f"{P}的原始日志保留一百八十天。")
m("xh-retention-2", 170, "fact", f"{P}的原始日志现在只保留九十天，以节省成本。", 3, "xh-retention")
m("xh-access", 53, "fact", f"申请{P}的数据权限要走审批流程，由数据安全组审核。")
m("xh-result-migr", 58, "task-result", f"{P}从 Hadoop 2 迁移到 Hadoop 3 完成，历时两个月，没有丢数据。")
m("xh-alert", 63, "fact", f"{P}的任务失败告警发到钉钉群“数据值班”。")
m("xh-quality", 68, "fact", f"{P}用 Great Expectations 做数据质量校验。")
m("xh-pitfall-tz", 73, "pitfall", f"{P}的时间字段全部存 UTC，出报表时再转成北京时间，否则会差八个小时。", 5)
m("xh-bi", 78, "fact", f"{P}的报表前端用的是 Superset。")
m("xh-oncall", 83, "fact", f"{P}每周轮流值班，值班表在飞书文档里。")
m("xh-kafka", 88, "fact", f"{P}的实时数据从 Kafka 接入，用 Flink 处理。")
m("xh-result-realtime", 93, "task-result", f"{P}的实时大屏延迟从五分钟降到了十秒。")
m("xh-budget", 98, "fact", f"{P}今年的云资源预算是四百万元。")

# --- 青鸟小程序 (Chinese): WeChat mini program ---
P = "青鸟小程序"
m("qn-what", 20, "fact", f"{P}是面向门店顾客的微信点餐小程序。")
m("qn-stack", 23, "fact", f"{P}用 Taro 框架开发，后端是 Node.js 的 NestJS 服务。")
m("qn-pay", 27, "fact", f"{P}的支付走微信支付，商户号由财务部管理。")
m("qn-review", 31, "pitfall", f"{P}每次发版都要经过微信审核，一般需要一到两天，要提前提交。", 4)
m("qn-design", 35, "fact", f"{P}的设计师是陈静，设计稿放在蓝湖。")
m("qn-users", 40, "fact", f"{P}的日活用户大约八万人。")
m("qn-users-2", 155, "fact", f"{P}的日活用户已经增长到十五万人。", 3, "qn-users")
m("qn-pitfall-size", 45, "pitfall", f"{P}的主包不能超过两兆，图片要放到 CDN 上。", 4)
m("qn-result-speed", 50, "task-result", f"{P}首屏加载时间从三点二秒优化到一点一秒。")
m("qn-test", 55, "fact", f"{P}的测试由测试组的刘洋负责，用例写在禅道里。")
m("qn-member", 60, "fact", f"{P}的会员积分规则是每消费一元积一分。")
m("qn-member-2", 190, "fact", f"{P}的会员积分规则改成了每消费一元积两分。", 3, "qn-member")
m("qn-pitfall-login", 65, "pitfall", f"{P}的登录态会过期，接口返回四零一时要静默重新登录。", 4)
m("qn-stores", 70, "fact", f"{P}目前接入了上海和苏州的一百二十家门店。")
m("qn-result-bug", 76, "task-result", f"修复了{P}下单时重复扣款的问题，原因是按钮没有防抖。")
m("qn-coupon", 81, "fact", f"{P}的优惠券由营销系统统一发放。")
m("qn-release", 86, "fact", f"{P}每两周发一个版本，周四提交审核。")
m("qn-monitor", 91, "fact", f"{P}的前端错误监控用的是阿里云 ARMS。")

# --- 云帆网关 (Chinese): API gateway ---
P = "云帆网关"
m("yf-what", 100, "fact", f"{P}是公司对外开放接口的统一入口。")
m("yf-stack", 103, "fact", f"{P}基于 Envoy 构建，配置由自研的控制面下发。")
m("yf-rate", 107, "fact", f"{P}对每个应用默认限流每秒一千次请求。")
m("yf-rate-2", 200, "fact", f"{P}对每个应用的默认限流调整为每秒五百次请求。", 3, "yf-rate")
m("yf-pitfall-cert", 111, "pitfall", f"{P}的证书曾经过期导致全站故障，现在证书到期前三十天自动告警。", 5)
m("yf-auth", 116, "fact", f"{P}用 JWT 校验调用方身份，密钥每季度轮换一次。")
m("yf-owner", 121, "fact", f"{P}由基础架构组的周强负责。")
m("yf-result-latency", 126, "task-result", f"{P}升级以后，转发延迟的九十九分位从二十毫秒降到了八毫秒。")
m("yf-region", 131, "fact", f"{P}部署在上海和北京两个机房，互为备份。")
m("yf-pitfall-header", 136, "pitfall", f"{P}会去掉下划线开头的请求头，客户端不要用这种请求头传参数。", 4)
m("yf-log", 141, "fact", f"{P}的访问日志写入 ClickHouse，保留三十天。")
m("yf-timeout", 146, "fact", f"{P}转发到后端服务的默认超时是两秒。")
m("yf-timeout-2", 215, "fact", f"{P}转发到后端服务的默认超时改成了五秒。", 3, "yf-timeout")
m("yf-canary", 151, "fact", f"{P}的配置变更先在百分之五的流量上灰度。")
m("yf-doc", 156, "fact", f"{P}的接入文档在内部开发者门户上。")

# --- 墨竹文档 (Chinese): document editor ---
P = "墨竹文档"
m("mz-what", 120, "fact", f"{P}是团队内部使用的在线协同编辑器。")
m("mz-crdt", 124, "fact", f"{P}的协同算法用的是 Yjs 的 CRDT。")
m("mz-storage", 128, "fact", f"{P}的文档快照每十分钟保存一次到 MongoDB。")
m("mz-pitfall-paste", 133, "pitfall", f"{P}从 Word 粘贴内容时会带入隐藏样式，要先清洗再插入。", 4)
m("mz-result-conflict", 139, "task-result", f"{P}解决了离线编辑合并时段落丢失的问题。")
m("mz-export", 144, "fact", f"{P}支持导出 PDF 和 Markdown，不支持导出 Word。")
m("mz-owner", 149, "fact", f"{P}的前端负责人是吴昊。")
m("mz-limit", 154, "fact", f"{P}单个文档最多支持五十人同时编辑。")
m("mz-search", 159, "fact", f"{P}的全文搜索基于 Elasticsearch，中文用 IK 分词。")
m("mz-pitfall-img", 164, "pitfall", f"{P}的图片上传以前没有限制大小，现在单张图片不能超过十兆。", 3)
m("mz-result-load", 169, "task-result", f"{P}打开一万字的长文档从四秒优化到了零点八秒。")
m("mz-version", 174, "fact", f"{P}保留每个文档最近一百个历史版本。")

# --- 天枢监控 (Chinese): monitoring ---
P = "天枢监控"
m("ts-what", 60, "fact", f"{P}收集所有服务的指标、日志和链路追踪。")
m("ts-stack", 64, "fact", f"{P}的指标存储用 VictoriaMetrics，链路追踪用 Jaeger。")
m("ts-pitfall-card", 69, "pitfall", f"{P}曾经因为标签里放了用户编号导致时间序列爆炸，标签里不要放高基数字段。", 5)
m("ts-retention", 74, "fact", f"{P}的指标数据保留十五天，降采样后保留一年。")
m("ts-page", 79, "fact", f"{P}的严重告警会打电话给值班工程师。")
m("ts-result-noise", 84, "task-result", f"{P}清理了重复告警，每周的告警数量从九百条降到一百二十条。")
m("ts-owner", 89, "fact", f"{P}由运维组的孙丽负责。")
m("ts-dash", 94, "fact", f"{P}的看板统一放在 Grafana 的“天枢”文件夹下。")
m("ts-agent", 99, "fact", f"{P}在每台机器上部署 OpenTelemetry Collector 采集数据。")
m("ts-pitfall-clock", 104, "pitfall", f"{P}发现过机器时钟不同步导致链路追踪错乱，所有机器必须开启时间同步。", 4)
m("ts-cost", 109, "task-result", f"{P}把日志从 Elasticsearch 迁到 Loki 以后，每月节省了五万元。")
m("ts-sla", 114, "fact", f"{P}自身的可用性目标是百分之九十九点九。")

# --- general team facts (mixed) ---
m("team-standup", 5, "fact", "The team standup is at 10:00 Shanghai time on weekdays.", 3)
m("team-standup-2", 120, "fact", "The team standup moved to 09:30 Shanghai time on weekdays.", 3, "team-standup")
m("team-sprint", 6, "fact", "Sprints are two weeks long and start on Mondays.", 3)
m("team-vpn", 14, "pitfall", "The office VPN drops connections longer than eight hours; reconnect before long jobs.", 3)
m("team-size", 16, "fact", "The platform team has eleven engineers across Shanghai and Berlin.", 2)
m("team-tool-chat", 19, "fact", "The team chats in Feishu; Slack is only for the Berlin partners.", 3)
m("team-wiki", 24, "fact", "Team documentation lives in the Confluence space PLAT.", 2)
m("team-budget", 58, "fact", "Cloud spending approvals above 10,000 USD go to the CTO.", 3)
m("team-offsite", 150, "general", "The team offsite is in Moganshan in November.", 1)
m("zh-team-dinner", 62, "general", "团队每个月最后一个周五晚上聚餐。", 1)
m("zh-team-interview", 72, "fact", "招聘面试一共三轮：笔试、技术面和主管面。", 2)
m("zh-team-code", 92, "preference", "团队代码规范要求函数不超过八十行。", 3)
m("zh-team-leave", 102, "fact", "请假超过三天需要提前一周在系统里提交申请。", 2)
m("zh-team-security", 112, "pitfall", "不要把生产数据库的密码写进代码仓库，曾经因此被安全组通报。", 5)
m("zh-team-printer", 118, "general", "十二楼的打印机经常卡纸，打印合同去十一楼。", 1)
m("zh-team-badge", 124, "general", "工牌丢了要去一楼前台补办，费用五十元。", 1)
m("zh-team-deploy", 134, "fact", "每周五下午四点以后禁止上线，紧急修复除外。", 4)
m("zh-team-onboard", 144, "fact", "新人入职第一周要完成安全培训和开发环境搭建。", 2)
m("zh-team-okr", 158, "fact", "团队每季度初制定 OKR，季度末复盘。", 2)
m("zh-team-hackathon", 168, "general", "公司每年十二月举办黑客马拉松，获奖团队有奖金。", 1)

# --- filler: task results and snapshots over the months (both languages), realistic noise ---
notes_en = [
 "Rotated the staging database credentials; the old ones are revoked.",
 "Upgraded the CI runners to Ubuntu 24.04; two flaky tests were fixed on the way.",
 "Wrote the postmortem for the March 12 outage: a bad config push to the cache cluster.",
 "Cleaned up 40 stale feature branches across the platform repositories.",
 "Benchmarked gRPC against REST for internal calls: gRPC cut p50 latency by a third.",
 "Migrated the team's dashboards from Kibana to Grafana.",
 "Reviewed the security audit findings; three medium issues remain open.",
 "Set up Renovate to open dependency update pull requests weekly.",
 "Drafted the Q3 roadmap for the platform team and shared it for comments.",
 "Investigated slow Docker builds: the layer cache was disabled on the new runners.",
 "Interviewed two backend candidates; one moves to the final round.",
 "Archived the old Jenkins server after the last jobs moved to GitHub Actions.",
 "Measured cold start of the Lambda functions: 1.4 s with Java, 180 ms with Go.",
 "Fixed the broken link checker in the documentation build.",
 "Prepared the demo of the new self-service portal for the all-hands meeting.",
 "Reduced the Terraform plan time from nine minutes to two by splitting state files.",
 "Reported a bug in the logging library upstream; a fix is merged for the next release.",
 "Tuned the JVM heap of the search service; garbage collection pauses fell below 50 ms.",
 "Wrote a runbook for restoring the Redis cluster from a snapshot.",
 "Moved the cron jobs of the reporting service to Kubernetes CronJobs.",
 "Checked the licence of every dependency before the open-source release.",
 "Replaced the hand-written retry loops with a shared backoff helper.",
 "Profiled the image resizer: libvips is four times faster than ImageMagick here.",
 "Updated the on-call handbook with the new escalation contacts.",
 "Ran the disaster recovery drill; failover to the backup region took 14 minutes.",
 "Enabled branch protection and required reviews on all production repositories.",
 "Compared three vector databases for the search prototype; picked Qdrant.",
 "Removed the unused analytics SDK from the mobile and web clients.",
 "Documented how to request production access for new engineers.",
 "Set the default log retention of development clusters to seven days.",
]
notes_zh = [
 "完成了测试环境数据库的扩容，磁盘从五百 G 扩到一 T。",
 "整理了上个季度的故障复盘，共七起，其中三起和配置变更有关。",
 "给新同事讲解了发布流程和回滚方法。",
 "排查了接口偶发超时的问题，原因是连接池太小，已经调大。",
 "更新了团队的值班手册，补充了夜间升级的联系人。",
 "清理了对象存储里过期的备份文件，释放了二十 T 空间。",
 "参加了架构评审会，讨论了订单服务拆分的方案。",
 "修复了定时任务在夏令时切换时重复执行的问题。",
 "完成了年度安全审计的材料准备。",
 "把构建镜像的基础系统从 CentOS 换成了 Debian。",
 "和产品经理对齐了下个版本的需求范围。",
 "统计了各业务线的云资源使用情况，发给了财务。",
 "写了一个脚本自动检查证书的过期时间。",
 "组织了一次代码评审分享会，主题是如何写好评审意见。",
 "压测了消息队列，单分区每秒可以处理两万条消息。",
 "整理了常见问题文档，放到了内部知识库。",
 "协助客服定位了一个用户数据不同步的问题。",
 "把日志采集的配置统一成了模板，减少了重复。",
 "评估了几种分布式锁方案，最后选择了基于 Redis 的实现。",
 "完成了机房网络割接，期间业务没有中断。",
 "给接口文档补充了错误码说明。",
 "优化了数据库慢查询，最慢的语句从十二秒降到了三百毫秒。",
 "帮市场部搭建了活动页面的临时服务器。",
 "升级了内部 Git 服务器的版本，修复了一个安全漏洞。",
 "整理了团队的技术债清单，按优先级排了序。",
 "调研了低代码平台，结论是暂时不引入。",
 "把测试覆盖率的统计接入了持续集成。",
 "为年终总结准备了项目数据和图表。",
 "处理了一次磁盘写满导致的服务告警。",
 "修改了告警规则，减少了夜间的误报。",
]
for i, t in enumerate(notes_en):
    m(f"note-en-{i:02}", 5 + i * 7, "task-result", t, 2)
for i, t in enumerate(notes_zh):
    m(f"note-zh-{i:02}", 8 + i * 7, "task-result", t, 2)

# --- a few more of the user's standing facts ---
m("pref-git", 26, "preference", "Rebase feature branches onto main; never merge main into a feature branch.", 3)
m("pref-naming", 47, "preference", "Go package names are short, lowercase, one word, no underscores.", 2)
m("pref-logs", 79, "preference", "Log messages start lowercase and carry structured key=value fields.", 2)
m("pref-docker", 101, "preference", "Pin Docker base images by digest, not by the latest tag.", 3)
m("pref-secrets", 117, "pitfall", "Never paste tokens into chat; share them through 1Password.", 5)
m("zh-pref-doc", 57, "preference", "技术方案要先写背景和目标，再写具体设计，最后写风险。", 3)
m("zh-pref-meeting", 67, "preference", "会议纪要要在会后两小时内发出，写清楚负责人和截止日期。", 3)
m("zh-pref-ask", 87, "preference", "遇到不确定的需求时先问清楚，不要自己猜。", 4)
m("zh-pref-travel", 147, "general", "林出差一般坐高铁，不喜欢坐飞机。", 1)
m("zh-pref-glasses", 177, "general", "林是近视眼，看屏幕时间长了要休息一下眼睛。", 1)

if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    keys = [x["key"] for x in M]
    assert len(keys) == len(set(keys)), "duplicate keys"
    for x in M:
        assert x["supersedes"] is None or x["supersedes"] in keys, x
    with open(os.path.join(here, "memories.jsonl"), "w") as f:
        for x in sorted(M, key=lambda x: (x["day"], x["key"])):
            f.write(json.dumps(x, ensure_ascii=False) + "\n")
    zh = sum(1 for x in M if any("\u4e00" <= c <= "\u9fff" for c in x["content"]))
    print(f"{len(M)} memories, {zh} Chinese, {len(M) - zh} English")
