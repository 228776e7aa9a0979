// Prints, one per line as "<name>\t<key hex>\t<value hex>", the record bytes MirrorMaker 2's own
// classes (connect-mirror / connect-mirror-client 3.9.1) write for fixed offset syncs and
// checkpoints, plus the internal topic names DefaultReplicationPolicy gives. In MM2's package
// because recordKey()/recordValue() are package-private. tests/unit/mirror/mm2-3.9.1-golden.tsv
// holds its output; to regenerate (the streams-mm2 jars are cached by headwater.testing.java):
//   CP=$(ls build/java/streams-mm2/*.jar | tr '\n' :)
//   javac -d /tmp/mm2golden -cp "$CP" tests/java/mm2/Mm2Golden.java
//   java -cp "/tmp/mm2golden:$CP" org.apache.kafka.connect.mirror.Mm2Golden > tests/unit/mirror/mm2-3.9.1-golden.tsv
package org.apache.kafka.connect.mirror;

import org.apache.kafka.common.TopicPartition;

public class Mm2Golden {
    static String hex(byte[] b) {
        StringBuilder s = new StringBuilder();
        for (byte x : b) s.append(String.format("%02x", x));
        return s.toString();
    }

    static void sync(String name, String topic, int partition, long up, long down) {
        OffsetSync s = new OffsetSync(new TopicPartition(topic, partition), up, down);
        System.out.println(name + "\t" + hex(s.recordKey()) + "\t" + hex(s.recordValue()));
    }

    static void checkpoint(String name, String group, String topic, int partition, long up, long down, String meta) {
        Checkpoint c = new Checkpoint(group, new TopicPartition(topic, partition), up, down, meta);
        System.out.println(name + "\t" + hex(c.recordKey()) + "\t" + hex(c.recordValue()));
    }

    public static void main(String[] args) {
        sync("offset_sync", "orders", 3, 1234, 1200);
        sync("offset_sync_zero", "a", 0, 0, 0);
        sync("offset_sync_unicode", "t\u00e9st", 2147483647, 9007199254740993L, 42);
        checkpoint("checkpoint", "billing", "dc1.orders", 3, 1234, 1201, "");
        checkpoint("checkpoint_metadata", "g", "orders", 0, 7, 5, "m\u00e9ta");
        DefaultReplicationPolicy p = new DefaultReplicationPolicy();
        System.out.println("topic_offset_syncs\t" + p.offsetSyncsTopic("agg") + "\t");
        System.out.println("topic_checkpoints\t" + p.checkpointsTopic("dc1") + "\t");
        System.out.println("topic_heartbeats\t" + p.heartbeatsTopic() + "\t");
        System.out.println("remote_topic\t" + p.formatRemoteTopic("dc1", "orders") + "\t");
        DefaultReplicationPolicy u = new DefaultReplicationPolicy();
        u.configure(java.util.Collections.singletonMap("replication.policy.separator", "_"));
        System.out.println("topic_offset_syncs_separator\t" + u.offsetSyncsTopic("agg") + "\t");
        System.out.println("topic_checkpoints_separator\t" + u.checkpointsTopic("dc1") + "\t");
        DefaultReplicationPolicy old = new DefaultReplicationPolicy();
        java.util.Map<String, Object> c = new java.util.HashMap<>();
        c.put("replication.policy.separator", "_");
        c.put("replication.policy.internal.topic.separator.enabled", "false");
        old.configure(c);
        System.out.println("topic_offset_syncs_separator_disabled\t" + old.offsetSyncsTopic("agg") + "\t");
        System.out.println("topic_checkpoints_separator_disabled\t" + old.checkpointsTopic("dc1") + "\t");
    }
}
