// Prints, one per line as "<name>\t<json>", the bytes Apache Kafka 2.3.1's own code writes into each
// znode for fixed inputs. tests/unit/zk/golden.json holds its output (regenerate: see that test).
import java.nio.charset.StandardCharsets;
import java.util.*;
import kafka.api.LeaderAndIsr;
import kafka.cluster.Broker;
import kafka.cluster.EndPoint;
import kafka.controller.LeaderIsrAndControllerEpoch;
import kafka.coordinator.transaction.ProducerIdBlock;
import kafka.coordinator.transaction.ProducerIdManager;
import kafka.zk.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.network.ListenerName;
import org.apache.kafka.common.security.auth.SecurityProtocol;
import scala.Option;
import scala.collection.JavaConverters;

public class ZkGolden {
    static void out(String name, byte[] data) {
        System.out.println(name + "\t" + new String(data, StandardCharsets.UTF_8));
    }

    static <T> scala.collection.Seq<T> seq(List<T> xs) {
        return JavaConverters.asScalaBufferConverter(xs).asScala();
    }

    public static void main(String[] args) {
        List<EndPoint> eps = Arrays.asList(
            new EndPoint("h1", 9092, ListenerName.normalised("PLAINTEXT"), SecurityProtocol.PLAINTEXT),
            new EndPoint("h1", 9093, ListenerName.normalised("INTERNAL"), SecurityProtocol.SASL_SSL));
        Broker rack = new Broker(1, seq(eps), Option.apply("r1"));
        out("broker_registration_rack", BrokerIdZNode.encode(new BrokerInfo(rack, 4, -1)));
        Broker noRack = new Broker(2, seq(Collections.singletonList(
            new EndPoint("h2", 9094, ListenerName.normalised("SSL"), SecurityProtocol.SSL))), Option.empty());
        out("broker_registration_no_plaintext", BrokerIdZNode.encode(new BrokerInfo(noRack, 4, -1)));

        Map<TopicPartition, scala.collection.Seq<Object>> assignment = new LinkedHashMap<>();
        assignment.put(new TopicPartition("orders", 0), seq(Arrays.<Object>asList(1, 2, 3)));
        assignment.put(new TopicPartition("orders", 1), seq(Arrays.<Object>asList(2, 3, 1)));
        out("topic_assignment", TopicZNode.encode(JavaConverters.mapAsScalaMapConverter(assignment).asScala()));

        LeaderAndIsr lai = new LeaderAndIsr(1, 7, seq(Arrays.<Object>asList(1, 2, 3)).toList(), 0);
        out("partition_state", TopicPartitionStateZNode.encode(new LeaderIsrAndControllerEpoch(lai, 3)));

        out("controller", ControllerZNode.encode(1, 1574000000000L));
        out("controller_epoch", ControllerEpochZNode.encode(3));

        Properties props = new Properties();
        props.setProperty("retention.ms", "60000");
        out("entity_config", ConfigEntityZNode.encode(props));

        Map<TopicPartition, scala.collection.Seq<Object>> moves = new LinkedHashMap<>();
        moves.put(new TopicPartition("orders", 0), seq(Arrays.<Object>asList(3, 1, 2)));
        out("reassign_partitions", ReassignPartitionsZNode.encode(JavaConverters.mapAsScalaMapConverter(moves).asScala()));

        Set<TopicPartition> tps = new LinkedHashSet<>(Collections.singletonList(new TopicPartition("orders", 0)));
        scala.collection.immutable.Set<TopicPartition> one = JavaConverters.asScalaSetConverter(tps).asScala().toSet();
        out("preferred_replica_election", PreferredReplicaElectionZNode.encode(one));
        out("isr_change", IsrChangeNotificationSequenceZNode.encode(JavaConverters.asScalaSetConverter(tps).asScala()));
        out("log_dir_event", LogDirEventNotificationSequenceZNode.encode(1));
        out("cluster_id", ClusterIdZNode.toJson("Ex2d7dF1QzS2a9w1fxE3yA"));
        out("producer_id_block", ProducerIdManager.generateProducerIdBlockJson(new ProducerIdBlock(1, 0L, 999L)));
    }
}
