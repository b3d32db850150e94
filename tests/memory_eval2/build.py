"""Writes the second labelled memory set (memories.jsonl, queries.jsonl) of this folder.

Written for issue 31, apart from tests/memory_eval and without running the fusion on it:
other domains (a data-science team and a household assistant), other phrasings, more
Chinese queries about English memories and the reverse. Each memory has a `tier`: the
smallest of the three stores (5, 50 or 300 records) it belongs to; a store of size N holds
every memory of tier <= N, and is asked the queries whose records it holds (and the
queries about nothing). The 300-record store is padded with generated logs and chores
(seeded, so the files are fixed) that no query is about.

    python3 tests/memory_eval2/build.py
"""
import json, os, random

HERE = os.path.dirname(os.path.abspath(__file__))

# (key, tier, kind, priority, content, supersedes)
M = [
    # ---- tier 5: a fresh store ----
    ("ds-warehouse", 5, "fact", 3, "Our analytics warehouse is Snowflake, and the team writes to the ANALYTICS_PROD schema.", None),
    ("home-allergy", 5, "fact", 5, "女儿对花生严重过敏，买零食前一定要看配料表。", None),
    ("ds-review", 5, "preference", 4, "Any notebook that feeds a dashboard needs a review from Priya before it gets scheduled.", None),
    ("home-recycling", 5, "fact", 3, "可回收垃圾每周三早上七点前放到楼下。", None),
    ("home-wifi", 5, "fact", 3, "The guest Wi-Fi password is written on a sticker under the router in the hall closet.", None),
    # ---- tier 50 ----
    ("ds-lead", 50, "fact", 3, "Priya Raman leads the data science team; escalate modelling questions to her.", None),
    ("ds-standup", 50, "fact", 3, "The data team's standup is at 9:30 on Mondays, Wednesdays and Fridays.", None),
    ("ds-python", 50, "pitfall", 4, "Notebooks run on Python 3.11 with pandas 2.2; do not upgrade pandas without telling the team.", None),
    ("ds-churn-metric", 50, "fact", 3, "The churn model is judged by AUC on the last full quarter, not on a random split.", None),
    ("ds-churn-owner", 50, "fact", 3, "Mateo owns the churn model and retrains it on the first Monday of each month.", None),
    ("ds-bi", 50, "fact", 3, "Dashboards are built in Looker; ad-hoc charts go in Hex.", None),
    ("ds-pii", 50, "pitfall", 5, "Never copy customer emails or phone numbers into notebooks; use the hashed user_key instead.", None),
    ("ds-gpu", 50, "fact", 3, "GPU jobs go to the shared A100 queue; bookings longer than four hours are announced in the #gpu channel first.", None),
    ("ds-modelreview-1", 50, "fact", 3, "The weekly model review meeting is on Tuesdays at 15:00.", None),
    ("ds-modelreview-2", 50, "fact", 3, "The weekly model review meeting moved to Thursdays at 14:00.", "ds-modelreview-1"),
    ("ds-label", 50, "fact", 3, "标注数据由外包团队完成，每一批都要抽检百分之五。", None),
    ("ds-abtest", 50, "preference", 4, "AB 测试至少要跑满两周才能下结论。", None),
    ("ds-cloudbill", 50, "fact", 3, "云账单每月超过三万元时要通知财务部。", None),
    ("ds-featurestore", 50, "fact", 3, "特征仓库用的是 Feast，离线特征每天凌晨两点更新。", None),
    ("ds-cleaning-1", 50, "fact", 3, "实习生小王负责清洗销售数据。", None),
    ("ds-cleaning-2", 50, "fact", 3, "销售数据的清洗现在由小李负责，小王转去做报表了。", "ds-cleaning-1"),
    ("ds-seed", 50, "preference", 4, "Set the random seed to 42 in every experiment so that results can be reproduced.", None),
    ("ds-utc", 50, "pitfall", 4, "All event timestamps in the warehouse are stored in UTC.", None),
    ("ds-forecast", 50, "fact", 3, "The demand forecast uses Prophet with weekly and yearly seasonality.", None),
    ("ds-report-1", 50, "fact", 3, "The quarterly insights report is due on March 28.", None),
    ("ds-report-2", 50, "fact", 3, "The quarterly insights report deadline was pushed back to April 4.", "ds-report-1"),
    ("ds-sqlstyle", 50, "preference", 3, "SQL in the repository uses lowercase keywords and one CTE per logical step.", None),
    ("ds-nomeeting", 50, "preference", 3, "周五下午不安排会议，留给大家专心写代码。", None),
    ("home-cat-food", 50, "fact", 3, "The cat, Mochi, gets wet food twice a day, at 7 am and 6 pm.", None),
    ("home-cat-vet", 50, "fact", 3, "Mochi's vet is Dr. Okafor at the Riverside Animal Clinic.", None),
    ("home-plants", 50, "fact", 3, "阳台上的绿萝每周浇一次水，冬天两周浇一次。", None),
    ("home-grandma", 50, "preference", 4, "奶奶每周日下午来家里吃饭，她不吃辣。", None),
    ("home-heater", 50, "fact", 3, "热水器的维修电话是 400-820-1234，保修到明年六月。", None),
    ("home-parking-1", 50, "fact", 3, "我们家的车停在地下二层 B 区 112 号车位。", None),
    ("home-parking-2", 50, "fact", 3, "我们家的车位换到了地下一层 A 区 37 号。", "home-parking-1"),
    ("home-thermostat", 50, "preference", 4, "Keep the thermostat at 20 °C at night; the baby sleeps badly when the room is warmer.", None),
    ("home-dentist-1", 50, "fact", 3, "Ethan's dentist appointment is on May 12 at 10:00.", None),
    ("home-dentist-2", 50, "fact", 3, "Ethan's dentist appointment was moved to May 19 at 16:30.", "home-dentist-1"),
    ("home-dinner", 50, "preference", 3, "The family's favourite weeknight dinner is tomato and egg noodles.", None),
    ("home-insurance", 50, "fact", 3, "The home insurance policy with Harbor Mutual renews every September.", None),
    ("home-pickup", 50, "fact", 4, "School pickup is at 15:15, except Fridays when it is at 12:30.", None),
    ("home-sugar", 50, "preference", 4, "老公在控制血糖，晚饭少放米饭，不要甜食。", None),
    ("home-piano", 50, "fact", 3, "儿子的钢琴课在每周六上午十点，地点是少年宫。", None),
    ("home-wool", 50, "pitfall", 4, "Wool sweaters must be hand-washed in cold water and dried flat.", None),
    ("home-food-budget", 50, "preference", 3, "每个月家里买菜做饭的预算是四千元。", None),
    ("home-spare-key", 50, "fact", 4, "A spare house key is with the neighbour at number 14, Mrs. Alvarez.", None),
    ("home-medicine", 50, "fact", 3, "家里的常用药放在厨房最上面的柜子里。", None),
    ("home-cleaner", 50, "fact", 3, "保洁阿姨每两周的周二上午来打扫卫生。", None),
    ("home-valve", 50, "fact", 3, "The main water shut-off valve is under the kitchen sink, behind the bin.", None),
    ("home-flights", 50, "preference", 3, "When the family travels we prefer aisle seats and morning flights.", None),
    # ---- tier 300: more facts among generated logs ----
    ("ds-serving", 300, "fact", 3, "Models are served by a FastAPI service on Kubernetes, in the ml-serving namespace.", None),
    ("ds-dictionary", 300, "fact", 3, "数据字典放在 Confluence 上数据团队的空间里。", None),
    ("ds-profiles", 300, "pitfall", 5, "用户画像只能用聚合数据，不能导出任何单个用户的明细。", None),
    ("ds-etl-page", 300, "fact", 3, "If the nightly ETL fails, the on-call analyst is paged through Opsgenie.", None),
    ("ds-retro-1", 300, "fact", 3, "项目复盘会在每个月最后一个周四开。", None),
    ("ds-retro-2", 300, "fact", 3, "项目复盘会改成每个季度开一次了。", "ds-retro-1"),
    ("ds-ethics", 300, "fact", 3, "New analysts get read access to the warehouse only after the data ethics course.", None),
    ("ds-palette", 300, "preference", 3, "Charts in reports use the colour-blind-safe palette from the style guide.", None),
    ("ds-spark", 300, "pitfall", 4, "Large joins run on the Databricks cluster; keep pandas jobs under 10 GB of memory.", None),
    ("ds-leave", 300, "fact", 3, "Mateo is on parental leave until the end of August.", None),
    ("home-fridge", 300, "fact", 3, "冰箱的滤芯每六个月换一次，上次是三月换的。", None),
    ("home-bike-lock", 300, "fact", 3, "Lily's bike lock combination is 3-1-4-8.", None),
    ("home-tv", 300, "preference", 4, "晚上九点以后孩子不能看电视。", None),
    ("home-gardener-1", 300, "fact", 3, "The gardener comes every other Saturday.", None),
    ("home-gardener-2", 300, "fact", 3, "The gardener now comes every Saturday morning instead of every other week.", "home-gardener-1"),
    ("home-mil-birthday", 300, "fact", 4, "婆婆的生日是农历八月十五。", None),
    ("home-phone-plan", 300, "fact", 3, "The family phone plan is with Verizon and renews on the 3rd of each month.", None),
    ("home-cat-kibble", 300, "preference", 3, "猫粮买无谷配方的那种，每次买两袋。", None),
    ("home-breaker", 300, "fact", 3, "The breaker for the garage is switch 7 in the panel by the back door.", None),
    ("home-mortgage", 300, "pitfall", 4, "The mortgage payment goes out on the 1st; keep at least $3,000 in the checking account.", None),
]

Q = [
    # exact: the record's own words
    ("exact", "Snowflake ANALYTICS_PROD schema", ["ds-warehouse"]),
    ("exact", "花生过敏 配料表", ["home-allergy"]),
    ("exact", "guest Wi-Fi password sticker", ["home-wifi"]),
    ("exact", "可回收垃圾 周三", ["home-recycling"]),
    ("exact", "churn model AUC last full quarter", ["ds-churn-metric"]),
    ("exact", "hashed user_key", ["ds-pii"]),
    ("exact", "Feast 离线特征", ["ds-featurestore"]),
    ("exact", "Dr. Okafor Riverside Animal Clinic", ["home-cat-vet"]),
    ("exact", "热水器 维修电话", ["home-heater"]),
    ("exact", "Harbor Mutual home insurance", ["home-insurance"]),
    ("exact", "Opsgenie nightly ETL", ["ds-etl-page"]),
    ("exact", "Lily bike lock combination", ["home-bike-lock"]),
    ("exact", "婆婆的生日", ["home-mil-birthday"]),
    ("exact", "Databricks cluster large joins", ["ds-spark"]),
    # synonym: the same idea with other words for some of them
    ("synonym", "which data warehouse does the analytics group use?", ["ds-warehouse"]),
    ("synonym", "who must approve a notebook behind a dashboard?", ["ds-review"]),
    ("synonym", "回收垃圾星期三几点拿下去？", ["home-recycling"]),
    ("synonym", "what python version do the notebooks use", ["ds-python"]),
    ("synonym", "who is the head of the data science group", ["ds-lead"]),
    ("synonym", "抽检标注数据的比例是多少", ["ds-label"]),
    ("synonym", "Mochi feeding times", ["home-cat-food"]),
    ("synonym", "老人家星期天来吃饭有什么要注意的", ["home-grandma"]),
    ("synonym", "what temperature should the heating be overnight", ["home-thermostat"]),
    ("synonym", "how to launder woollen jumpers", ["home-wool"]),
    ("synonym", "where is the main water tap to turn off", ["home-valve"]),
    ("synonym", "where are reports' colour schemes defined", ["ds-palette"]),
    ("synonym", "冰箱滤网多久更换", ["home-fridge"]),
    # paraphrase: no content word in common with the record
    ("paraphrase", "where can visitors find how to get online?", ["home-wifi"]),
    ("paraphrase", "who signs off on analysis code before it runs automatically?", ["ds-review"]),
    ("paraphrase", "孩子不能碰哪种坚果？", ["home-allergy"]),
    ("paraphrase", "how do we make experiments repeatable?", ["ds-seed"]),
    ("paraphrase", "when should my kid be collected from class at the end of the week?", ["home-pickup"]),
    ("paraphrase", "什么时候可以说实验结果靠谱了？", ["ds-abtest"]),
    ("paraphrase", "if I get locked out, who can let me in?", ["home-spare-key"]),
    ("paraphrase", "which tool do we use to predict how much will sell?", ["ds-forecast"]),
    ("paraphrase", "家里一个月吃饭花多少钱合适？", ["home-food-budget"]),
    ("paraphrase", "what should I never paste from the customer tables?", ["ds-pii"]),
    ("paraphrase", "头疼了去哪儿找药？", ["home-medicine"]),
    ("paraphrase", "how should a query be laid out in our codebase?", ["ds-sqlstyle"]),
    ("paraphrase", "what do we eat on a busy school night?", ["home-dinner"]),
    ("paraphrase", "where do trained predictors get exposed as an API?", ["ds-serving"]),
    ("paraphrase", "什么时候能让新人查库？", ["ds-ethics"]),
    # crosslingual: a Chinese question about an English memory, or the reverse
    ("crosslingual", "What is my daughter allergic to?", ["home-allergy"]),
    ("crosslingual", "客人的无线网密码在哪里？", ["home-wifi"]),
    ("crosslingual", "我们的数据仓库用的是什么？", ["ds-warehouse"]),
    ("crosslingual", "when do the recyclables go out?", ["home-recycling"]),
    ("crosslingual", "仪表盘用的笔记本上线前要谁审核？", ["ds-review"]),
    ("crosslingual", "流失模型用什么指标评估？", ["ds-churn-metric"]),
    ("crosslingual", "who checks the labelled data from the outsourcing team?", ["ds-label"]),
    ("crosslingual", "猫一天喂几次？", ["home-cat-food"]),
    ("crosslingual", "how often should the pothos on the balcony be watered?", ["home-plants"]),
    ("crosslingual", "what is the warranty on the water heater?", ["home-heater"]),
    ("crosslingual", "GPU 任务要提前在哪里说？", ["ds-gpu"]),
    ("crosslingual", "羊毛衫怎么洗？", ["home-wool"]),
    ("crosslingual", "when is my son's piano lesson?", ["home-piano"]),
    ("crosslingual", "where is the data dictionary kept?", ["ds-dictionary"]),
    ("crosslingual", "数据出问题了会怎么通知值班的人？", ["ds-etl-page"]),
    ("crosslingual", "车库的电闸是哪一个？", ["home-breaker"]),
    ("crosslingual", "can kids watch TV late in the evening?", ["home-tv"]),
    # typo: misspelled words
    ("typo", "snowflak analytcs schema", ["ds-warehouse"]),
    ("typo", "gest wifi pasword", ["home-wifi"]),
    ("typo", "Pirya notebok reveiw", ["ds-review"]),
    ("typo", "pandsa upgrade pyhton 3.11", ["ds-python"]),
    ("typo", "Mateo retrians the churn modle", ["ds-churn-owner"]),
    ("typo", "Lookr dashbords", ["ds-bi"]),
    ("typo", "Ethans dentst appointment", ["home-dentist-2"]),
    ("typo", "thermostatt at nigth", ["home-thermostat"]),
    ("typo", "spare hosue key neighbor", ["home-spare-key"]),
    ("typo", "morgage payment checking acount", ["home-mortgage"]),
    ("typo", "Verizn phone plan renwal", ["home-phone-plan"]),
    # newest: the latest of an updated fact
    ("newest", "when is the weekly model review?", ["ds-modelreview-2"]),
    ("newest", "谁负责清洗销售数据？", ["ds-cleaning-2"]),
    ("newest", "when is the quarterly insights report due?", ["ds-report-2"]),
    ("newest", "我们家的车位在哪里？", ["home-parking-2"]),
    ("newest", "when is Ethan's dentist appointment?", ["home-dentist-2"]),
    ("newest", "项目复盘多久开一次？", ["ds-retro-2"]),
    ("newest", "how often does the gardener come?", ["home-gardener-2"]),
    ("newest", "模型评审会是星期几？", ["ds-modelreview-2"]),
    ("newest", "where do we park the car?", ["home-parking-2"]),
    ("newest", "季度洞察报告什么时候交？", ["ds-report-2"]),
    # none: nothing stored is about these
    ("none", "what is the capital of Peru?", []),
    ("none", "how many moons does Jupiter have?", []),
    ("none", "明天的股票行情怎么样？", []),
    ("none", "recommend a good science fiction novel", []),
    ("none", "火星上有水吗？", []),
    ("none", "怎么学会游泳？", []),
]

# Fillers for the 300 store: logs of work and chores no query asks about.
TABLES = ["orders_daily", "sessions_raw", "web_events", "inventory_snapshot", "marketing_spend", "support_tickets", "app_installs", "store_visits"]
JOBS = ["backfill", "dedup pass", "schema check", "row-count audit", "sample export", "partition compaction"]
ZH_TASKS = ["整理了{t}的字段说明", "重跑了{t}的回填任务", "检查了{t}的空值比例", "给{t}加了分区", "导出了{t}的样本"]
ITEMS = ["light bulbs", "batteries", "dish soap", "paper towels", "a new doormat", "printer paper", "olive oil", "laundry pods", "coffee beans", "a shower curtain"]
SHOPS = ["the hardware store", "Costco", "the corner shop", "Target", "the farmers market"]
ZH_ITEMS = ["洗衣液", "卫生纸", "大米", "酱油", "拖把", "垃圾袋", "牙膏", "鸡蛋", "保鲜膜", "电池"]
ZH_CHORES = ["擦了窗户", "整理了衣柜", "清理了冰箱", "拖了地", "换了床单", "洗了窗帘"]
MONTHS = ["January", "February", "March", "April", "June", "July", "October", "November"]


def fillers(n):
    rng = random.Random(31)
    out, seen = [], set()
    while len(out) < n:
        kind = rng.randrange(6)
        d, k = rng.randint(1, 28), rng.randint(2, 95)
        if kind == 0:
            text = f"Ran the {rng.choice(JOBS)} on {rng.choice(TABLES)} for {rng.choice(MONTHS)}; it took {k} minutes."
        elif kind == 1:
            text = f"{rng.choice(MONTHS)} {d}: {rng.choice(TABLES)} had {k * 1000 + d} new rows after the load."
        elif kind == 2:
            text = f"{rng.randint(1, 12)}月{d}日" + rng.choice(ZH_TASKS).format(t=rng.choice(TABLES)) + f"，用了{k}分钟。"
        elif kind == 3:
            text = f"Bought {rng.choice(ITEMS)} at {rng.choice(SHOPS)} for ${k}.{d:02d}."
        elif kind == 4:
            text = f"{rng.randint(1, 12)}月{d}日买了{rng.choice(ZH_ITEMS)}，花了{k}元。"
        else:
            text = f"{rng.randint(1, 12)}月{d}日" + rng.choice(ZH_CHORES) + "。"
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


def main():
    rows = []
    for day, (key, tier, kind, prio, content, sup) in enumerate(M):
        rows.append(dict(key=key, tier=tier, day=day, kind=kind, priority=prio, content=content, supersedes=sup))
    pad = 300 - len(rows)
    for i, text in enumerate(fillers(pad)):
        # Interleaved with the hand-written tier-300 memories by day.
        rows.append(dict(key=f"log-{i:03d}", tier=300, day=i * len(M) // pad, kind="task-result", priority=2, content=text, supersedes=None))
    rows.sort(key=lambda r: (r["day"], r["key"]))
    keys = {r["key"] for r in rows}
    tier_of = {r["key"]: r["tier"] for r in rows}
    for r in rows:
        assert r["supersedes"] is None or tier_of[r["supersedes"]] <= r["tier"], r["key"]
    for cls, q, rel in Q:
        assert all(k in keys for k in rel), q
    with open(os.path.join(HERE, "memories.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    with open(os.path.join(HERE, "queries.jsonl"), "w") as f:
        for cls, q, rel in Q:
            f.write(json.dumps(dict(cls=cls, query=q, relevant=rel), ensure_ascii=False) + "\n")
    print(len(rows), "memories,", len(Q), "queries")


main()
