/*
 * The Java client (kafka-clients 2.3.1 or 4.x: one source, compiled against each) driven by pytest:
 * `java Driver <command> <bootstrap> [args] [key=value client configs]`. Every result is one JSON object
 * per line on stdout; diagnostics go to stderr. Commands:
 *
 *   produce <bootstrap> <topic> <count> <value-bytes> [cfg]  sends records k<i> -> v<i> padded to
 *       value-bytes, each with headers h=i and n="x"; prints {"acked":[[partition,offset],...]} or
 *       {"error":...}
 *   consume <bootstrap> <topic> <count> [cfg]  assign every partition from the beginning, prints
 *       {"records":[{p,o,k,len,sha,headers}]} once `count` arrived (or 60 s passed)
 *   member <bootstrap> <topic> <group> [cfg]  a group member: prints {"event":"assigned"|"revoked",
 *       "partitions":[...]} from its rebalance listener and {"event":"polled","count":n,...} after each
 *       poll that returned records; stdin lines are commands: commit | seek <p> <offset> | pause |
 *       resume | position | exit (each acknowledged with {"event":"done","command":...})
 *   admin <bootstrap> <op> [args]  one AdminClient call, prints {"op":..,"result":..} or {"op":..,
 *       "error":<exception class>,"message":..}
 *   roundtrip <bootstrap> <topic> <count> <value-bytes> [cfg]  produce, then consume (two lines)
 *   serve  the commands above from stdin, one JVM for many (see serve())
 *
 * Methods whose names changed between 2.3 and 4.x are called by reflection (`call`), so the one source
 * compiles against both.
 */
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.acl.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.resource.*;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class Driver {
    public static void main(String[] argv) throws Exception {
        if (argv[0].equals("serve")) serve();
        else dispatch(argv);
        System.out.flush();
        System.exit(0);
    }

    /** Commands from stdin, one a line (its arguments separated by tabs), each run as `java Driver
     *  <args>` would run it, followed by {"served":true} or, when it threw, {"served":false,"error":..,
     *  "trace":..}: one JVM start for many commands. Ends at the end of stdin. */
    static void serve() throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null; ) {
            if (line.isEmpty()) continue;
            try {
                dispatch(line.split("\t", -1));
                emit(map("served", true));
            } catch (Throwable t) {
                java.io.StringWriter trace = new java.io.StringWriter();
                t.printStackTrace(new java.io.PrintWriter(trace));
                emit(map("served", false, "error", t.getClass().getSimpleName(), "trace", trace.toString()));
            }
        }
    }

    static void dispatch(String[] argv) throws Exception {
        String cmd = argv[0];
        String bootstrap = argv[1];
        List<String> rest = new ArrayList<>(Arrays.asList(argv).subList(2, argv.length));
        Properties cfg = new Properties();
        cfg.put("bootstrap.servers", bootstrap);
        for (Iterator<String> it = rest.iterator(); it.hasNext(); ) {
            String a = it.next();
            int eq = a.indexOf('=');
            if (eq > 0) {
                cfg.put(a.substring(0, eq), a.substring(eq + 1));
                it.remove();
            }
        }
        switch (cmd) {
            case "produce": produce(cfg, rest.get(0), Integer.parseInt(rest.get(1)), Integer.parseInt(rest.get(2))); break;
            case "consume": consume(cfg, rest.get(0), Integer.parseInt(rest.get(1))); break;
            case "roundtrip": {  // topic count size: produce, then read every partition back from the start
                produce(cfg, rest.get(0), Integer.parseInt(rest.get(1)), Integer.parseInt(rest.get(2)));
                consume(cfg, rest.get(0), Integer.parseInt(rest.get(1)));
                break;
            }
            case "member": member(cfg, rest.get(0), rest.get(1)); break;
            case "admin": admin(cfg, rest); break;
            default: throw new IllegalArgumentException(cmd);
        }
    }

    // ---- producer ----------------------------------------------------------------------------

    static void produce(Properties cfg, String topic, int count, int size) throws Exception {
        try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(cfg, new ByteArraySerializer(), new ByteArraySerializer())) {
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                List<Header> headers = Arrays.asList(
                        new RecordHeader("h", Integer.toString(i).getBytes(StandardCharsets.UTF_8)),
                        new RecordHeader("n", "x".getBytes(StandardCharsets.UTF_8)));
                futures.add(p.send(new ProducerRecord<>(topic, null, ("k" + i).getBytes(StandardCharsets.UTF_8), value(i, size), headers)));
            }
            p.flush();
            List<Object> acked = new ArrayList<>();
            try {
                for (Future<RecordMetadata> f : futures) {
                    RecordMetadata m = f.get(60, TimeUnit.SECONDS);
                    acked.add(Arrays.asList(m.partition(), m.offset()));
                }
                emit(map("acked", acked));
            } catch (ExecutionException e) {
                emit(map("error", e.getCause().getClass().getSimpleName(), "message", String.valueOf(e.getCause().getMessage()), "acked", acked));
            }
        }
    }

    static byte[] value(int i, int size) {
        byte[] head = ("v" + i).getBytes(StandardCharsets.UTF_8);
        byte[] v = new byte[Math.max(size, head.length)];
        for (int j = 0; j < v.length; j++) v[j] = (byte) ('a' + (i + j) % 26);
        System.arraycopy(head, 0, v, 0, head.length);
        return v;
    }

    // ---- consumer ----------------------------------------------------------------------------

    static KafkaConsumer<byte[], byte[]> consumer(Properties cfg) {
        return new KafkaConsumer<>(cfg, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    static Map<String, Object> describe(ConsumerRecord<byte[], byte[]> r) throws Exception {
        Map<String, Object> h = new LinkedHashMap<>();
        for (Header x : r.headers()) h.put(x.key(), x.value() == null ? null : new String(x.value(), StandardCharsets.UTF_8));
        byte[] v = r.value();
        String prefix = v == null ? null : new String(v, 0, Math.min(v.length, 16), StandardCharsets.UTF_8);
        return map("p", r.partition(), "o", r.offset(), "k", r.key() == null ? null : new String(r.key(), StandardCharsets.UTF_8),
                "len", v == null ? -1 : v.length, "prefix", prefix, "sha", v == null ? null : sha(v), "headers", h,
                "ts", r.timestamp());
    }

    static String sha(byte[] b) throws Exception {
        byte[] d = MessageDigest.getInstance("SHA-256").digest(b);
        StringBuilder s = new StringBuilder();
        for (int i = 0; i < 8; i++) s.append(String.format("%02x", d[i]));
        return s.toString();
    }

    static void consume(Properties cfg, String topic, int count) throws Exception {
        cfg.putIfAbsent("auto.offset.reset", "earliest");
        cfg.putIfAbsent("enable.auto.commit", "false");
        try (KafkaConsumer<byte[], byte[]> c = consumer(cfg)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo pi : c.partitionsFor(topic)) tps.add(new TopicPartition(topic, pi.partition()));
            c.assign(tps);
            c.seekToBeginning(tps);
            List<Object> out = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 60_000;
            while (out.size() < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) out.add(describe(r));
            }
            emit(map("records", out));
        }
    }

    static void member(Properties cfg, String topic, String group) throws Exception {
        cfg.put("group.id", group);
        cfg.putIfAbsent("auto.offset.reset", "earliest");
        cfg.putIfAbsent("enable.auto.commit", "false");
        BlockingQueue<String> commands = new LinkedBlockingQueue<>();
        Thread reader = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) commands.add(line.trim());
            } catch (Exception e) {
                // stdin closed
            }
            commands.add("exit");
        });
        reader.setDaemon(true);
        reader.start();
        try (KafkaConsumer<byte[], byte[]> c = consumer(cfg)) {
            c.subscribe(Collections.singletonList(topic), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> parts) { emit(map("event", "revoked", "partitions", parts(parts))); }
                public void onPartitionsAssigned(Collection<TopicPartition> parts) { emit(map("event", "assigned", "partitions", parts(parts))); }
            });
            while (true) {
                ConsumerRecords<byte[], byte[]> recs = c.poll(Duration.ofMillis(200));
                if (!recs.isEmpty()) {
                    List<Object> seen = new ArrayList<>();
                    for (ConsumerRecord<byte[], byte[]> r : recs) seen.add(Arrays.asList(r.partition(), r.offset()));
                    emit(map("event", "polled", "count", recs.count(), "records", seen));
                }
                String command;
                while ((command = commands.poll()) != null) {
                    String[] w = command.split(" ");
                    switch (w[0]) {
                        case "commit": c.commitSync(); break;
                        case "seek": c.seek(new TopicPartition(topic, Integer.parseInt(w[1])), Long.parseLong(w[2])); break;
                        case "pause": c.pause(c.assignment()); break;
                        case "resume": c.resume(c.paused()); break;
                        case "position": {
                            Map<String, Object> pos = new TreeMap<>();
                            for (TopicPartition tp : c.assignment()) pos.put(Integer.toString(tp.partition()), c.position(tp));
                            emit(map("event", "position", "positions", pos, "paused", parts(c.paused())));
                            break;
                        }
                        case "exit": emit(map("event", "done", "command", "exit")); return;
                        default: throw new IllegalArgumentException(command);
                    }
                    emit(map("event", "done", "command", w[0]));
                }
            }
        }
    }

    static List<Object> parts(Collection<TopicPartition> parts) {
        List<Object> out = new ArrayList<>();
        for (TopicPartition tp : parts) out.add(tp.partition());
        Collections.sort((List) out);
        return out;
    }

    // ---- admin -------------------------------------------------------------------------------

    static void admin(Properties cfg, List<String> args) throws Exception {
        String op = args.get(0);
        cfg.putIfAbsent("request.timeout.ms", "20000");
        try (AdminClient a = AdminClient.create(cfg)) {
            Object result;
            try {
                result = adminOp(a, op, args.subList(1, args.size()));
            } catch (ExecutionException | InvocationTargetException e) {
                Throwable c = e.getCause();
                while ((c instanceof ExecutionException || c instanceof InvocationTargetException) && c.getCause() != null) c = c.getCause();
                emit(map("op", op, "error", c.getClass().getSimpleName(), "message", String.valueOf(c.getMessage())));
                return;
            } catch (UnsupportedVersionException e) {
                emit(map("op", op, "error", e.getClass().getSimpleName(), "message", String.valueOf(e.getMessage())));
                return;
            }
            emit(map("op", op, "result", result));
        }
    }

    static Object adminOp(AdminClient a, String op, List<String> args) throws Exception {
        switch (op) {
            case "describeCluster": {
                DescribeClusterResult r = a.describeCluster();
                List<Object> nodes = new ArrayList<>();
                for (Node n : r.nodes().get()) nodes.add(n.id());
                Collections.sort((List) nodes);
                return map("nodes", nodes, "controller", r.controller().get().id(), "clusterId", r.clusterId().get());
            }
            case "createTopic": {  // name partitions rf [k=v configs as name:value]
                NewTopic t = new NewTopic(args.get(0), Integer.parseInt(args.get(1)), Short.parseShort(args.get(2)));
                Map<String, String> configs = new HashMap<>();
                for (String kv : args.subList(3, args.size())) configs.put(kv.split(":")[0], kv.split(":", 2)[1]);
                t.configs(configs);
                a.createTopics(Collections.singleton(t)).all().get();
                return "created";
            }
            case "listTopics": return new TreeSet<>(a.listTopics().names().get());
            case "describeTopic": {
                Map<String, TopicDescription> d = (Map<String, TopicDescription>) ((KafkaFuture<?>) call(a.describeTopics(Collections.singleton(args.get(0))), "allTopicNames", "all")).get();
                TopicDescription td = d.get(args.get(0));
                List<Object> parts = new ArrayList<>();
                for (TopicPartitionInfo p : td.partitions()) {
                    List<Object> replicas = new ArrayList<>(), isr = new ArrayList<>();
                    for (Node n : p.replicas()) replicas.add(n.id());
                    for (Node n : p.isr()) isr.add(n.id());
                    parts.add(map("partition", p.partition(), "leader", p.leader() == null ? -1 : p.leader().id(), "replicas", replicas, "isr", isr));
                }
                return map("name", td.name(), "internal", td.isInternal(), "partitions", parts);
            }
            case "deleteTopic": a.deleteTopics(Collections.singleton(args.get(0))).all().get(); return "deleted";
            case "createPartitions": {
                a.createPartitions(Collections.singletonMap(args.get(0), NewPartitions.increaseTo(Integer.parseInt(args.get(1))))).all().get();
                return "created";
            }
            case "describeConfigs": {  // topic|broker name [config names to print]
                ConfigResource res = new ConfigResource(ConfigResource.Type.valueOf(args.get(0).toUpperCase()), args.get(1));
                Config c = a.describeConfigs(Collections.singleton(res)).all().get().get(res);
                Map<String, Object> out = new TreeMap<>();
                for (ConfigEntry e : c.entries()) {
                    if (args.size() > 2 && !args.subList(2, args.size()).contains(e.name())) continue;
                    out.put(e.name(), map("value", e.value(), "source", String.valueOf(e.source()), "sensitive", e.isSensitive(), "readOnly", e.isReadOnly()));
                }
                return out;
            }
            case "incrementalAlterConfigs": {  // type name op:key[:value]...
                ConfigResource res = new ConfigResource(ConfigResource.Type.valueOf(args.get(0).toUpperCase()), args.get(1));
                List<AlterConfigOp> ops = new ArrayList<>();
                for (String s : args.subList(2, args.size())) {
                    String[] w = s.split(":", 3);
                    ops.add(new AlterConfigOp(new ConfigEntry(w[1], w.length > 2 ? w[2] : null), AlterConfigOp.OpType.valueOf(w[0])));
                }
                a.incrementalAlterConfigs(Collections.singletonMap(res, (Collection<AlterConfigOp>) ops)).all().get();
                return "altered";
            }
            case "alterConfigs": {  // the whole-set AlterConfigs (removed from the 4.x client): type name key:value...
                ConfigResource res = new ConfigResource(ConfigResource.Type.valueOf(args.get(0).toUpperCase()), args.get(1));
                List<ConfigEntry> entries = new ArrayList<>();
                for (String s : args.subList(2, args.size())) entries.add(new ConfigEntry(s.split(":")[0], s.split(":", 2)[1]));
                Method m = a.getClass().getMethod("alterConfigs", Map.class);
                Object r = m.invoke(a, Collections.singletonMap(res, new Config(entries)));
                ((KafkaFuture<?>) call(r, "all")).get();
                return "altered";
            }
            case "deleteRecords": {  // topic partition beforeOffset
                TopicPartition tp = new TopicPartition(args.get(0), Integer.parseInt(args.get(1)));
                DeletedRecords d = a.deleteRecords(Collections.singletonMap(tp, RecordsToDelete.beforeOffset(Long.parseLong(args.get(2))))).lowWatermarks().get(tp).get();
                return map("lowWatermark", d.lowWatermark());
            }
            case "createAcl": {  // principal topic operation
                AclBinding b = new AclBinding(new ResourcePattern(ResourceType.TOPIC, args.get(1), PatternType.LITERAL),
                        new AccessControlEntry(args.get(0), "*", AclOperation.valueOf(args.get(2)), AclPermissionType.ALLOW));
                a.createAcls(Collections.singleton(b)).all().get();
                return "created";
            }
            case "describeAcls": {  // topic
                AclBindingFilter f = new AclBindingFilter(new ResourcePatternFilter(ResourceType.TOPIC, args.get(0), PatternType.ANY), AccessControlEntryFilter.ANY);
                List<Object> out = new ArrayList<>();
                for (AclBinding b : a.describeAcls(f).values().get()) out.add(b.entry().principal() + " " + b.entry().operation() + " " + b.entry().permissionType());
                Collections.sort((List) out);
                return out;
            }
            case "deleteAcls": {  // topic
                AclBindingFilter f = new AclBindingFilter(new ResourcePatternFilter(ResourceType.TOPIC, args.get(0), PatternType.ANY), AccessControlEntryFilter.ANY);
                return a.deleteAcls(Collections.singleton(f)).all().get().size();
            }
            case "listGroups": {
                List<Object> out = new ArrayList<>();
                for (ConsumerGroupListing g : a.listConsumerGroups().all().get()) out.add(g.groupId());
                Collections.sort((List) out);
                return out;
            }
            case "describeGroup": {
                ConsumerGroupDescription d = a.describeConsumerGroups(Collections.singleton(args.get(0))).all().get().get(args.get(0));
                List<Object> members = new ArrayList<>();
                for (MemberDescription m : d.members()) members.add(map("clientId", m.clientId(), "partitions", parts(m.assignment().topicPartitions())));
                return map("state", String.valueOf(call(d, "groupState", "state")), "assignor", d.partitionAssignor(), "members", members,
                        "coordinator", d.coordinator().id());
            }
            case "groupOffsets": {
                Map<String, Object> out = new TreeMap<>();
                for (Map.Entry<TopicPartition, OffsetAndMetadata> e : a.listConsumerGroupOffsets(args.get(0)).partitionsToOffsetAndMetadata().get().entrySet())
                    out.put(e.getKey().toString(), e.getValue().offset());
                return out;
            }
            case "alterGroupOffsets": {  // group topic partition offset (KIP-396, 2.4+ client; OffsetCommit on the wire)
                TopicPartition tp = new TopicPartition(args.get(1), Integer.parseInt(args.get(2)));
                Method m = a.getClass().getMethod("alterConsumerGroupOffsets", String.class, Map.class);
                Object r = m.invoke(a, args.get(0), Collections.singletonMap(tp, new OffsetAndMetadata(Long.parseLong(args.get(3)))));
                ((KafkaFuture<?>) call(r, "all")).get();
                return "altered";
            }
            case "deleteGroupOffsets": {  // group topic partition (OffsetDelete, API 47: Kafka 2.4)
                TopicPartition tp = new TopicPartition(args.get(1), Integer.parseInt(args.get(2)));
                Method m = a.getClass().getMethod("deleteConsumerGroupOffsets", String.class, Set.class);
                Object r = m.invoke(a, args.get(0), Collections.singleton(tp));
                ((KafkaFuture<?>) call(r, "all")).get();
                return "deleted";
            }
            case "deleteGroup": a.deleteConsumerGroups(Collections.singleton(args.get(0))).all().get(); return "deleted";
            case "electPreferredLeaders": {  // topic partition (2.3: electPreferredLeaders; 2.4+: electLeaders)
                TopicPartition tp = new TopicPartition(args.get(0), Integer.parseInt(args.get(1)));
                Object r;
                try {
                    Class<?> electionType = Class.forName("org.apache.kafka.common.ElectionType");
                    Object preferred = electionType.getField("PREFERRED").get(null);
                    r = a.getClass().getMethod("electLeaders", electionType, Set.class).invoke(a, preferred, Collections.singleton(tp));
                } catch (ClassNotFoundException e) {
                    r = a.getClass().getMethod("electPreferredLeaders", Collection.class).invoke(a, Collections.singleton(tp));
                }
                ((KafkaFuture<?>) call(r, "all")).get();
                return "elected";
            }
            case "describeLogDirs": {  // broker id
                int b = Integer.parseInt(args.get(0));
                Object r = a.describeLogDirs(Collections.singleton(b));
                Map<Integer, ?> all = (Map<Integer, ?>) ((KafkaFuture<?>) call(r, "allDescriptions", "all")).get();
                Map<String, Object> out = new TreeMap<>();
                for (Map.Entry<String, ?> d : ((Map<String, ?>) all.get(b)).entrySet()) {
                    Object desc = d.getValue();
                    Map<TopicPartition, ?> replicas = (Map<TopicPartition, ?>) fieldOrCall(desc, "replicaInfos");
                    List<Object> tps = new ArrayList<>();
                    for (TopicPartition tp : replicas.keySet()) tps.add(tp.toString());
                    Collections.sort((List) tps);
                    out.put(d.getKey(), tps);
                }
                return out;
            }
            case "alterPartitionReassignments": {  // KIP-455 (API 45, Kafka 2.4): topic partition broker...
                TopicPartition tp = new TopicPartition(args.get(0), Integer.parseInt(args.get(1)));
                List<Integer> target = new ArrayList<>();
                for (String s : args.subList(2, args.size())) target.add(Integer.parseInt(s));
                Class<?> nr = Class.forName("org.apache.kafka.clients.admin.NewPartitionReassignment");
                Object reassignment = nr.getConstructor(List.class).newInstance(target);
                Object r = a.getClass().getMethod("alterPartitionReassignments", Map.class).invoke(a, Collections.singletonMap(tp, Optional.of(reassignment)));
                ((KafkaFuture<?>) call(r, "all")).get();
                return "altered";
            }
            case "listPartitionReassignments": {
                Object r = a.getClass().getMethod("listPartitionReassignments").invoke(a);
                return String.valueOf(((KafkaFuture<?>) call(r, "reassignments")).get());
            }
            case "createDelegationToken": {
                Object r = a.getClass().getMethod("createDelegationToken").invoke(a);
                return String.valueOf(((KafkaFuture<?>) call(r, "delegationToken")).get());
            }
            case "describeFeatures": {
                Object r = a.getClass().getMethod("describeFeatures").invoke(a);
                return String.valueOf(((KafkaFuture<?>) call(r, "featureMetadata")).get());
            }
            case "listOffsets": {  // topic partition latest|earliest (ListOffsets through the admin: 2.5+)
                TopicPartition tp = new TopicPartition(args.get(0), Integer.parseInt(args.get(1)));
                Class<?> spec = Class.forName("org.apache.kafka.clients.admin.OffsetSpec");
                Object s = spec.getMethod(args.get(2)).invoke(null);
                Object r = a.getClass().getMethod("listOffsets", Map.class).invoke(a, Collections.singletonMap(tp, s));
                Map<TopicPartition, ?> all = (Map<TopicPartition, ?>) ((KafkaFuture<?>) call(r, "all")).get();
                return call(all.get(tp), "offset");
            }
            default: throw new IllegalArgumentException(op);
        }
    }

    /** The first of `names` that `target` has as a public no-argument method, called. */
    static Object call(Object target, String... names) throws Exception {
        for (String n : names) {
            Method m;
            try {
                m = target.getClass().getMethod(n);
            } catch (NoSuchMethodException e) {
                continue;
            }
            m.setAccessible(true);
            return m.invoke(target);
        }
        throw new NoSuchMethodException(target.getClass() + ": none of " + Arrays.toString(names));
    }

    static Object fieldOrCall(Object target, String name) throws Exception {
        try {
            return call(target, name);
        } catch (NoSuchMethodException e) {
            java.lang.reflect.Field f = target.getClass().getField(name);
            return f.get(target);
        }
    }

    // ---- output ------------------------------------------------------------------------------

    static Map<String, Object> map(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) m.put((String) kv[i], kv[i + 1]);
        return m;
    }

    static synchronized void emit(Object o) {
        StringBuilder s = new StringBuilder();
        json(o, s);
        System.out.println(s);
        System.out.flush();
    }

    static void json(Object o, StringBuilder s) {
        if (o == null) s.append("null");
        else if (o instanceof Number || o instanceof Boolean) s.append(o);
        else if (o instanceof Map) {
            s.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) o).entrySet()) {
                if (!first) s.append(',');
                first = false;
                json(String.valueOf(e.getKey()), s);
                s.append(':');
                json(e.getValue(), s);
            }
            s.append('}');
        } else if (o instanceof Iterable) {
            s.append('[');
            boolean first = true;
            for (Object x : (Iterable<?>) o) {
                if (!first) s.append(',');
                first = false;
                json(x, s);
            }
            s.append(']');
        } else {
            s.append('"');
            for (char c : o.toString().toCharArray()) {
                if (c == '"' || c == '\\') s.append('\\').append(c);
                else if (c < 0x20) s.append(String.format("\\u%04x", (int) c));
                else s.append(c);
            }
            s.append('"');
        }
    }
}
